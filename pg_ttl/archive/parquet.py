"""Rows as Parquet (pyarrow, the ``archive`` extra).

PostgreSQL types map to Parquet types a reader understands as they are:

| PostgreSQL | Parquet (Arrow) |
|---|---|
| boolean | bool |
| smallint, integer, bigint | int16, int32, int64 |
| real, double precision | float32, float64 |
| numeric(p, s), p <= 38 | decimal128(p, s) |
| date | date32 |
| timestamp | timestamp[us] |
| timestamptz | timestamp[us, tz=UTC] |
| bytea | binary |
| text, varchar, char, name | string |
| anything else (numeric without precision, uuid, json, jsonb, arrays, ...) | string (text form) |

A string column of another type holds PostgreSQL's text form, cast back on restore.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Any

from pg_ttl.archive.storage import StorageError


def load() -> Any:
    """Import pyarrow now (a second or so the first time), not inside a short transaction."""
    return _pyarrow()


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.csv
        import pyarrow.parquet
    except ImportError as exc:  # the archive extra
        raise StorageError("tiers write Parquet with pyarrow: pip install 'pg-ttl[archive]'") from exc
    return pyarrow


@dataclass
class Column:
    name: str
    typname: str  # pg_type.typname
    sqltype: str  # format_type(): how to cast a text value back
    typmod: int

    @property
    def as_text(self) -> bool:
        """Read and written in PostgreSQL's text form."""
        return self.arrow_type() is None

    def arrow_type(self) -> Any:
        pa = _pyarrow()
        simple = {"bool": pa.bool_(), "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(),
                  "float4": pa.float32(), "float8": pa.float64(), "date": pa.date32(),
                  "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"),
                  "bytea": pa.binary(), "text": pa.string(), "varchar": pa.string(), "bpchar": pa.string(),
                  "name": pa.string()}
        if self.typname in simple:
            return simple[self.typname]
        if self.typname == "numeric" and self.typmod >= 4:
            precision, scale = ((self.typmod - 4) >> 16) & 0xFFFF, (self.typmod - 4) & 0xFFFF
            if 0 < precision <= 38 and scale <= precision:
                return pa.decimal128(precision, scale)
        return None


class Unwritable(StorageError):
    """A value with no Parquet form: an infinite or BC date or timestamp, a year after 9999,
    a numeric NaN or infinity in a numeric(p, s) column."""


def table(columns: list[Column], rows: list[tuple[Any, ...]]) -> Any:
    """An Arrow table of the rows (Python values, as psycopg loads them)."""
    pa = _pyarrow()
    schema = pa.schema([(c.name, c.arrow_type() or pa.string()) for c in columns])
    return pa.Table.from_pydict({c.name: [r[i] for r in rows] for i, c in enumerate(columns)}, schema=schema)


def table_from_csv(columns: list[Column], data: bytes, extra: dict[str, str]) -> Any:
    """An Arrow table of ``COPY ... TO STDOUT (FORMAT csv)`` output: the columns, then the
    ``extra`` ones ("timestamptz" or "text"). Parsed by Arrow, not row by row in Python: the
    session writes ISO dates in UTC, hex bytea and exact floats (engine.connect). A NULL is an
    unquoted empty field, an empty string a quoted one."""
    pa = _pyarrow()
    pacsv = pa.csv
    names = [c.name for c in columns] + list(extra)
    # bytea comes as its hex text form (\x...), turned into bytes below
    types = {c.name: pa.string() if c.typname == "bytea" else c.arrow_type() or pa.string() for c in columns}
    types.update({n: pa.timestamp("us", tz="UTC") if t == "timestamptz" else pa.string() for n, t in extra.items()})
    try:
        got = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names, block_size=max(1 << 20, len(data) + 1)),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False, true_values=["t"],
                                                 false_values=["f"]))
    except pa.ArrowInvalid as exc:
        raise Unwritable(f"a value has no Parquet form ({exc}): infinite or BC dates and timestamps, years "
                         "after 9999 and numeric NaN cannot be archived as Parquet") from exc
    for i, c in enumerate(columns):
        if c.typname == "bytea":
            values = [None if v is None else bytes.fromhex(v[2:]) for v in got.column(i).to_pylist()]
            got = got.set_column(i, c.name, pa.array(values, pa.binary()))
    return got


def by_day(rows: Any, time: str, *, keep: bool = False) -> list[tuple[str, Any, Any, Any]]:
    """The rows of each UTC day of their ``time`` column, in day order (without it unless
    ``keep``): (day as YYYY-MM-DD, rows, earliest and latest ``time``)."""
    pa = _pyarrow()
    days = pa.compute.cast(rows.column(time), pa.date32())  # a UTC timestamp's date
    kept = [n for n in rows.column_names if keep or n != time]
    out = []
    for d in sorted(pa.compute.unique(days).to_pylist()):
        group = rows.filter(pa.compute.equal(days, pa.scalar(d, pa.date32())))
        span = pa.compute.min_max(group.column(time))
        out.append((d.isoformat(), group.select(kept), span["min"].as_py(), span["max"].as_py()))
    return out


def encode_table(data: Any) -> bytes:
    pa = _pyarrow()
    out = io.BytesIO()
    pa.parquet.write_table(data, out, compression="zstd")
    return out.getvalue()


def decode(data: bytes) -> tuple[list[str], list[tuple[Any, ...]]]:
    pa = _pyarrow()
    table = pa.parquet.read_table(io.BytesIO(data))
    names = list(table.column_names)
    columns = [table.column(n).to_pylist() for n in names]
    return names, list(zip(*columns, strict=True)) if columns else []


def to_csv(data: bytes, drop: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], bytes, int] | None:
    """An object's rows as CSV that PostgreSQL's COPY reads back exactly (every value quoted,
    a NULL unquoted and empty; ISO times, shortest exact floats): its column names, the CSV,
    its rows. None for an object with a binary column (Arrow writes no CSV of bytes)."""
    pa = _pyarrow()
    table = pa.parquet.read_table(io.BytesIO(data))
    table = table.drop_columns([n for n in table.column_names if n in drop])
    if any(pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type) for f in table.schema):
        return None
    out = io.BytesIO()
    pa.csv.write_csv(table, out, write_options=pa.csv.WriteOptions(include_header=False, quoting_style="all_valid"))
    return list(table.column_names), out.getvalue(), table.num_rows


def count(data: bytes) -> int:
    pa = _pyarrow()
    return int(pa.parquet.ParquetFile(io.BytesIO(data)).metadata.num_rows)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
