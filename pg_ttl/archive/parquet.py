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


def _pyarrow() -> Any:
    try:
        import pyarrow
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


def encode(columns: list[Column], rows: list[tuple[Any, ...]]) -> bytes:
    pa = _pyarrow()
    schema = pa.schema([(c.name, c.arrow_type() or pa.string()) for c in columns])
    arrays = {c.name: [r[i] for r in rows] for i, c in enumerate(columns)}
    table = pa.Table.from_pydict(arrays, schema=schema)
    out = io.BytesIO()
    pa.parquet.write_table(table, out, compression="zstd")
    return out.getvalue()


def decode(data: bytes) -> tuple[list[str], list[tuple[Any, ...]]]:
    pa = _pyarrow()
    table = pa.parquet.read_table(io.BytesIO(data))
    names = list(table.column_names)
    columns = [table.column(n).to_pylist() for n in names]
    return names, list(zip(*columns, strict=True)) if columns else []


def count(data: bytes) -> int:
    pa = _pyarrow()
    return int(pa.parquet.ParquetFile(io.BytesIO(data)).metadata.num_rows)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
