"""YDB's TTL clause in TTL DDL, turned into pg_ttl's ``ttl_*`` options.

    ALTER TABLE t SET (TTL = Interval("PT1H") ON created_at);
    ALTER TABLE t SET (TTL = Interval("PT1H") ON modified_at AS SECONDS);
    CREATE TABLE t (...) WITH (TTL = Interval("PT0S") ON expire_at);
    ALTER TABLE t RESET (TTL);            -- already TTL DDL: TTL removed

PostgreSQL's grammar cannot parse the clause, so this front end reads it from
the scanner's tokens (pglast), before the statement is parsed, and writes
``ttl_expire_after = 'PT1H', ttl_column = 'created_at'[, ttl_unit = 'seconds']``
in its place; every other byte of the input stays, and the clause's line
breaks too, so line numbers after it do not move. Mistakes in the clause are
reported at their own line and column. Tiers (``Interval("P1D") TO EXTERNAL
DATA SOURCE cold, Interval("P30D") DELETE ON c``) become ``ttl_tiers = 'P1D TO
cold'`` with the last (DELETE) interval as ``ttl_expire_after``.
"""

from __future__ import annotations

import re
from typing import Any

import pglast

UNITS = ("seconds", "milliseconds", "microseconds", "nanoseconds")
# ISO 8601 durations as YDB writes them: P[nY][nM][nW][nD][T[nH][nM][n[.n]S]]
_DURATION = re.compile(r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$", re.I)


def translate(sql: str, filename: str = "<input>") -> str:
    """``sql`` with every YDB TTL clause replaced by ``ttl_*`` options (the same text
    when there is none). Raises TtlDdlError (from pg_ttl.ddl.rewrite) on a bad clause."""
    if "interval" not in sql.lower():
        return sql  # no clause possible: no scan
    try:
        tokens = pglast.parser.scan(sql)
    except pglast.parser.ParseError:
        return sql  # the rewriter reports it
    out: list[str] = []
    pos = 0
    i = 0
    seen_in_statement = False
    while i < len(tokens):
        t = tokens[i]
        if t.name == "ASCII_59":  # ';'
            seen_in_statement = False
        if _starts_clause(sql, tokens, i):
            if seen_in_statement:
                raise _error("a statement can have one TTL clause", sql, t.start, filename)
            seen_in_statement = True
            end, options = _clause(sql, tokens, i, filename)
            out.append(sql[pos:t.start])
            out.append(options + "\n" * sql[t.start:tokens[end].end + 1].count("\n"))
            pos = tokens[end].end + 1
            i = end + 1
            continue
        i += 1
    out.append(sql[pos:])
    return "".join(out)


def _is_name(t: Any) -> bool:
    """A column or storage name as PostgreSQL takes one unquoted (ColId): an identifier,
    or a keyword that is not reserved ("at", "key", "data", "timestamp" ...)."""
    return t.name == "IDENT" or t.kind in ("UNRESERVED_KEYWORD", "COL_NAME_KEYWORD")


def _word(sql: str, t: Any) -> str:
    return sql[t.start:t.end + 1]


def _starts_clause(sql: str, tokens: list[Any], i: int) -> bool:
    """``TTL = Interval(`` as an option of a WITH (...) / SET (...) list."""
    if i + 3 >= len(tokens) or i == 0:
        return False
    t = tokens[i]
    return (t.name == "IDENT" and _word(sql, t).lower() == "ttl" and tokens[i + 1].name == "ASCII_61"
            and tokens[i + 2].name == "INTERVAL" and tokens[i + 3].name == "ASCII_40"
            and tokens[i - 1].name in ("ASCII_40", "ASCII_44"))


def _clause(sql: str, tokens: list[Any], i: int, filename: str) -> tuple[int, str]:
    """Read ``TTL = tier[, tier ...] ON column [AS unit]`` from token i; returns the index of
    its last token and the options it stands for."""
    j = i + 2
    tiers: list[tuple[str, str | None, int]] = []  # (duration, storage or None for DELETE, offset)
    while True:
        if j + 3 >= len(tokens) or tokens[j].name != "INTERVAL" or tokens[j + 1].name != "ASCII_40":
            raise _error('Interval("...") expected', sql, tokens[min(j, len(tokens) - 1)].start, filename)
        value_token = tokens[j + 2]
        if value_token.name not in ("SCONST", "IDENT") or tokens[j + 3].name != "ASCII_41":
            raise _error('Interval("...") expected: an ISO 8601 duration in quotes, e.g. Interval("PT1H")',
                         sql, value_token.start, filename)
        duration = _unquote(_word(sql, value_token))
        if not _DURATION.match(duration):
            raise _error(f'"{duration}" is not an ISO 8601 duration', sql, value_token.start, filename,
                         hint='e.g. "PT1H" (1 hour), "P30D" (30 days), "PT0S" (at the column\'s own time)')
        j += 4
        storage: str | None = None
        if j < len(tokens) and tokens[j].name == "TO":
            names = [tokens[k].name if k < len(tokens) else "" for k in range(j + 1, j + 5)]
            if names[:3] != ["EXTERNAL", "DATA_P", "SOURCE"] or j + 4 >= len(tokens) or not _is_name(tokens[j + 4]):
                raise _error("TO EXTERNAL DATA SOURCE name expected", sql, tokens[j].start, filename)
            storage = _unquote(_word(sql, tokens[j + 4]))
            j += 5
        elif j < len(tokens) and tokens[j].name == "DELETE_P":
            j += 1
        tiers.append((duration, storage, value_token.start))
        if j + 1 < len(tokens) and tokens[j].name == "ASCII_44" and tokens[j + 1].name == "INTERVAL":
            if storage is None:
                raise _error("DELETE must be the last tier", sql, tokens[j + 1].start, filename)
            j += 1
            continue
        break
    if j >= len(tokens) or tokens[j].name != "ON":
        raise _error("ON column expected after the TTL's intervals", sql,
                     tokens[min(j, len(tokens) - 1)].start, filename, hint='e.g. TTL = Interval("PT1H") ON created_at')
    if j + 1 >= len(tokens) or not _is_name(tokens[j + 1]):
        raise _error("a column name expected after ON", sql, tokens[min(j + 1, len(tokens) - 1)].start, filename)
    column = _identifier(_word(sql, tokens[j + 1]))
    j += 1
    unit: str | None = None
    if j + 1 < len(tokens) and tokens[j + 1].name == "AS":
        if j + 2 >= len(tokens) or tokens[j + 2].name != "IDENT":
            raise _error("a unit expected after AS: " + ", ".join(u.upper() for u in UNITS), sql,
                         tokens[j + 1].start, filename)
        unit = _word(sql, tokens[j + 2]).lower()
        if unit not in UNITS:
            raise _error(f"unknown unit {_word(sql, tokens[j + 2])}", sql, tokens[j + 2].start, filename,
                         hint="SECONDS, MILLISECONDS, MICROSECONDS or NANOSECONDS")
        j += 2
    *moves, last = tiers
    if last[1] is not None:
        raise _error("the last tier must DELETE: pg_ttl deletes rows after their last tier", sql, last[2], filename,
                     hint='e.g. TTL = Interval("P1D") TO EXTERNAL DATA SOURCE cold, Interval("P30D") DELETE ON c')
    options = f"ttl_expire_after = {_literal(last[0])}, ttl_column = {_literal(column)}"
    if unit:
        options += f", ttl_unit = {_literal(unit)}"
    if moves:  # storage tiers (docs/tiers.md): the storages are made with ttl.create_storage
        options += ", ttl_tiers = " + _literal(", ".join(f"{d} TO {s}" for d, s, _ in moves))
    return j, options


def _unquote(word: str) -> str:
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        return word[1:-1].replace(word[0] * 2, word[0])
    return word


def _identifier(word: str) -> str:
    """A column name as PostgreSQL reads it: unquoted names fold to lower case."""
    return _unquote(word) if word.startswith('"') else word.lower()


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _error(message: str, sql: str, offset: int, filename: str, hint: str | None = None) -> Exception:
    from pg_ttl.ddl.rewrite import TtlDdlError

    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return TtlDdlError(message, filename, line, column, hint)
