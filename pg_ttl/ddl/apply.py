"""Rewrite TTL DDL and run it: the whole file in one transaction, or statement by statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from pg_ttl.ddl.rewrite import Statement, TtlDdlError, rewrite_statements


class ApplyError(TtlDdlError):
    """The database refused a statement; ``applied`` statements stay (0 in one-transaction mode)."""

    def __init__(self, message: str, filename: str, statement: Statement, hint: str | None,
                 applied: int, sqlstate: str | None) -> None:
        super().__init__(message, filename, statement.line, statement.column, hint)
        self.applied = applied
        self.sqlstate = sqlstate


@dataclass
class ApplyResult:
    statements: int  # input statements run
    executed: int  # statements sent to the server after the rewrite
    changed: int  # input statements that were TTL DDL


def apply(conn: psycopg.Connection[Any], sql: str, filename: str = "<input>",
          statement_by_statement: bool = False) -> ApplyResult:
    """Rewrite ``sql`` and execute it on ``conn``.

    Nothing runs unless the whole file rewrites cleanly. By default every
    statement runs in one transaction: the first error rolls everything back.
    With ``statement_by_statement`` each input statement commits on its own
    (its rewrite, e.g. CREATE TABLE + ttl.set_options, still as one unit), and
    the statements before an error stay applied.
    """
    statements = rewrite_statements(sql, filename)
    # Statements that end or start transactions would break the unit the
    # caller asked for; only an autocommit connection applying statement by
    # statement (like psql) may run them as they come.
    if not (statement_by_statement and conn.autocommit):
        for st in statements:
            if st.transaction_control:
                raise TtlDdlError(
                    f"{st.source.split(None, 1)[0].upper()} inside a file applied as one transaction",
                    filename, st.line, st.column,
                    hint="remove transaction control from the file, or use --statement-by-statement")
    if not statement_by_statement:
        # A transaction, or a savepoint when the caller already is in one.
        with conn.transaction():
            _run(conn, statements, filename, atomic=True)
    elif conn.autocommit:
        _run(conn, statements, filename, atomic=False)
    else:
        for i, st in enumerate(statements):
            with conn.transaction():
                _run(conn, [st], filename, atomic=False, done_before=i)
    return ApplyResult(statements=len(statements), executed=sum(len(s.output) for s in statements),
                       changed=sum(1 for s in statements if s.changed))


def _run(conn: psycopg.Connection[Any], statements: Sequence[Statement], filename: str, atomic: bool,
         done_before: int = 0) -> None:
    for done, st in enumerate(statements, start=done_before):
        try:
            if len(st.output) == 1:
                conn.execute(st.output[0])
            else:
                # One simple query: PostgreSQL runs it as one implicit transaction,
                # so a statement and its TTL calls (or USING TTL's setting) go together.
                conn.execute(";\n".join(st.output))
        except psycopg.Error as exc:
            diag = exc.diag
            message = diag.message_primary or str(exc).strip().splitlines()[0]
            raise ApplyError(message, filename, st, diag.message_hint, 0 if atomic else done,
                             diag.sqlstate) from exc
