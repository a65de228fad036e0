"""TTL in a user's own alembic migrations.

Import this module in your ``env.py`` (or in a migration) and use::

    op.enable_ttl("events", expire_after="30 days", column="created_at", job_cron="@daily")
    op.alter_ttl("events", delete_batch_size=500, existing={"delete_batch_size": "1000"})
    op.alter_ttl("events", reset=["job_cron"], existing={"job_cron": "@daily"})
    op.disable_ttl("events", existing={"expire_after": "30 days", "column": "created_at"})
    op.execute_ttl("ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days')",
                   reverse_sql="ALTER TABLE users ALTER COLUMN email RESET (ttl)")

Options are the TTL options without the ``ttl_`` prefix. Every operation is
TTL DDL underneath (``pg_ttl.rewrite``), so the same checks and the same SQL
API calls apply, and ``alembic upgrade --sql`` prints the plain SQL.

Downgrades: each operation has ``reverse()`` (``op.invoke(op_obj.reverse())``,
or write the inverse call yourself). ``existing`` gives the values before the
change, as ``existing_type`` does for ``alter_column``: ``alter_ttl`` restores
them (options missing from ``existing`` are reset to their defaults) and
``disable_ttl``'s reverse re-enables with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from alembic.operations import MigrateOperation, Operations
from pglast import ast
from pglast.enums import AlterTableType, CoercionForm, ObjectType
from pglast.stream import RawStream

from pg_ttl.ddl.options import ALIASES, OPTIONS, OptionError, check
from pg_ttl.ddl.rewrite import rewrite_statements

__all__ = ["AlterTTLOp", "DisableTTLOp", "EnableTTLOp", "ExecuteTTLOp", "enable_sql", "execute_ttl_ddl", "ttl_ddl"]


def _key(name: str) -> str:
    key = name.lower().removeprefix("ttl_")
    key = ALIASES.get(key, key)  # column_name: the same option as column, as everywhere else
    if key not in OPTIONS:
        raise ValueError(f"unknown TTL option {name!r}; accepted: {', '.join(OPTIONS)}")
    return key


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ttl_ddl(table_name: str, schema: str | None = None, set_options: Mapping[str, Any] | None = None,
            reset: Sequence[str] = ()) -> str:
    """``ALTER TABLE ... SET (ttl_...)`` / ``RESET (...)`` for these options, printed by pglast."""
    cmds: list[ast.AlterTableCmd] = []
    if set_options:
        cmds.append(ast.AlterTableCmd(subtype=AlterTableType.AT_SetRelOptions, def_=tuple(
            ast.DefElem(defname="ttl_" + _key(k), arg=ast.String(sval=_text(v))) for k, v in set_options.items())))
    if reset:
        names = ["ttl" if r.lower() == "ttl" else "ttl_" + _key(r) for r in reset]
        cmds.append(ast.AlterTableCmd(subtype=AlterTableType.AT_ResetRelOptions,
                                      def_=tuple(ast.DefElem(defname=n) for n in names)))
    stmt = ast.AlterTableStmt(relation=ast.RangeVar(schemaname=schema, relname=table_name, inh=True,
                                                    relpersistence="p"),
                              cmds=tuple(cmds), objtype=ObjectType.OBJECT_TABLE, missing_ok=False)
    return str(RawStream()(stmt))


def execute_ttl_ddl(operations: Operations, sql: str) -> None:
    """Rewrite TTL DDL (any SQL) and run it in the migration's transaction;
    offline (``--sql``) print the plain SQL instead."""
    statements = rewrite_statements(sql, "<migration>")
    ctx = operations.get_context()
    for st in statements:
        for piece in st.output:
            if ctx.as_sql:
                ctx.impl.static_output(piece.rstrip() + ";")
            else:
                # The DBAPI cursor directly: SQLAlchemy's text() would read ":name"
                # and "%" inside literals as parameters.
                cursor = operations.get_bind().connection.cursor()
                try:
                    cursor.execute(piece)
                finally:
                    cursor.close()


def _clean(options: Mapping[str, Any]) -> dict[str, Any]:
    return {_key(k): v for k, v in options.items()}


@Operations.register_operation("enable_ttl")
class EnableTTLOp(MigrateOperation):
    """Give a table a TTL (it must have none yet)."""

    def __init__(self, table_name: str, schema: str | None = None, **options: Any) -> None:
        self.table_name = table_name
        self.schema = schema
        self.options = _clean(options)

    @classmethod
    def enable_ttl(cls, operations: Operations, table_name: str, schema: str | None = None,
                   **options: Any) -> None:
        """``op.enable_ttl("events", expire_after="30 days", column="created_at", ...)``"""
        operations.invoke(cls(table_name, schema=schema, **options))

    def reverse(self) -> DisableTTLOp:
        return DisableTTLOp(self.table_name, schema=self.schema, existing=self.options)


@Operations.register_operation("disable_ttl")
class DisableTTLOp(MigrateOperation):
    """Remove a table's TTL (``RESET (ttl)``), column TTLs included."""

    def __init__(self, table_name: str, schema: str | None = None,
                 existing: Mapping[str, Any] | None = None) -> None:
        self.table_name = table_name
        self.schema = schema
        self.existing = None if existing is None else _clean(existing)

    @classmethod
    def disable_ttl(cls, operations: Operations, table_name: str, schema: str | None = None,
                    existing: Mapping[str, Any] | None = None) -> None:
        """``op.disable_ttl("events", existing={...})``; ``existing`` only matters for reverse()."""
        operations.invoke(cls(table_name, schema=schema, existing=existing))

    def reverse(self) -> EnableTTLOp:
        if self.existing is None:
            raise ValueError(f"disable_ttl({self.table_name!r}) cannot be reversed without existing= options")
        return EnableTTLOp(self.table_name, schema=self.schema, **self.existing)


@Operations.register_operation("alter_ttl")
class AlterTTLOp(MigrateOperation):
    """Change options of a table's TTL; ``reset`` restores options to their defaults."""

    def __init__(self, table_name: str, schema: str | None = None, reset: Sequence[str] = (),
                 existing: Mapping[str, Any] | None = None, **options: Any) -> None:
        self.table_name = table_name
        self.schema = schema
        self.reset = [_key(r) for r in reset]
        self.existing = None if existing is None else _clean(existing)
        self.options = _clean(options)

    @classmethod
    def alter_ttl(cls, operations: Operations, table_name: str, schema: str | None = None,
                  reset: Sequence[str] = (), existing: Mapping[str, Any] | None = None, **options: Any) -> None:
        """``op.alter_ttl("events", delete_batch_size=500, reset=["job_cron"], existing={...})``"""
        operations.invoke(cls(table_name, schema=schema, reset=reset, existing=existing, **options))

    def reverse(self) -> AlterTTLOp:
        if self.existing is None:
            raise ValueError(f"alter_ttl({self.table_name!r}) cannot be reversed without existing= options")
        touched = list(self.options) + [r for r in self.reset if r not in self.options]
        restore = {k: self.existing[k] for k in touched if self.existing.get(k) is not None}
        back = [k for k in touched if self.existing.get(k) is None]
        now = {**{k: None for k in self.reset}, **self.options}
        return AlterTTLOp(self.table_name, schema=self.schema, reset=back,
                          existing={k: v for k, v in now.items() if v is not None}, **restore)


@Operations.register_operation("execute_ttl")
class ExecuteTTLOp(MigrateOperation):
    """Run TTL DDL text (``CREATE TABLE ... WITH (ttl_...)``, ``ALTER TABLE ... SET (ttl_...)``, any SQL)."""

    def __init__(self, sql: str, reverse_sql: str | None = None) -> None:
        self.sql = sql
        self.reverse_sql = reverse_sql

    @classmethod
    def execute_ttl(cls, operations: Operations, sql: str, reverse_sql: str | None = None) -> None:
        """``op.execute_ttl("ALTER TABLE t SET (ttl_expire_after = '7 days')", reverse_sql=...)``"""
        operations.invoke(cls(sql, reverse_sql=reverse_sql))

    def reverse(self) -> ExecuteTTLOp:
        if self.reverse_sql is None:
            raise ValueError("execute_ttl(...) cannot be reversed without reverse_sql=")
        return ExecuteTTLOp(self.reverse_sql, reverse_sql=self.sql)


# enable_ttl calls ttl.enable, which refuses a table that already has a TTL
# (TTL DDL's SET would change it instead); its parameters are named like the
# options, except column. Options it has no parameter for follow as TTL DDL.
_ENABLE_ARGS = {"column": "column_name"}
_ENABLE_PARAMS = ("expire_after", "column", "expiration_expression", "unit", "job_cron", "select_batch_size",
                  "delete_batch_size", "select_rate_limit", "delete_rate_limit", "pause", "partition_action",
                  "detach_schema", "job_cron_override")


def enable_sql(table_name: str, schema: str | None, options: Mapping[str, Any]) -> str:
    """``SELECT ttl.enable('tbl', expire_after => '30 days', ...)`` (plus ``ALTER TABLE ... SET (ttl_...)``
    for options ttl.enable has no parameter for), checked and printed by pglast."""
    values = {_key(k): _text(v) for k, v in options.items()}
    for k, v in values.items():
        try:
            check(k, v)
        except OptionError as exc:
            raise ValueError(f"enable_ttl({table_name!r}): {exc}") from None
    if "expire_after" not in values and "expiration_expression" not in values:
        raise ValueError(f'enable_ttl({table_name!r}): "expire_after" and/or "expiration_expression" must be set')
    table = RawStream()(ast.RangeVar(schemaname=schema, relname=table_name, inh=True, relpersistence="p"))
    args: list[ast.Node] = [ast.A_Const(isnull=False, val=ast.String(sval=str(table)))]
    args += [ast.NamedArgExpr(name=_ENABLE_ARGS.get(k, k), argnumber=-1,
                              arg=ast.A_Const(isnull=False, val=ast.String(sval=v)))
             for k, v in values.items() if k in _ENABLE_PARAMS]
    call = ast.FuncCall(funcname=(ast.String(sval="ttl"), ast.String(sval="enable")), args=tuple(args),
                        funcformat=CoercionForm.COERCE_EXPLICIT_CALL)
    text = str(RawStream()(ast.SelectStmt(targetList=(ast.ResTarget(val=call),))))
    rest = {k: v for k, v in values.items() if k not in _ENABLE_PARAMS}
    return text + (";\n" + ttl_ddl(table_name, schema, rest) if rest else "")


@Operations.implementation_for(EnableTTLOp)
def _enable_ttl(operations: Operations, operation: EnableTTLOp) -> None:
    execute_ttl_ddl(operations, enable_sql(operation.table_name, operation.schema, operation.options))


@Operations.implementation_for(DisableTTLOp)
def _disable_ttl(operations: Operations, operation: DisableTTLOp) -> None:
    execute_ttl_ddl(operations, ttl_ddl(operation.table_name, operation.schema, reset=["ttl"]))


@Operations.implementation_for(AlterTTLOp)
def _alter_ttl(operations: Operations, operation: AlterTTLOp) -> None:
    execute_ttl_ddl(operations, ttl_ddl(operation.table_name, operation.schema, operation.options,
                                        operation.reset))


@Operations.implementation_for(ExecuteTTLOp)
def _execute_ttl(operations: Operations, operation: ExecuteTTLOp) -> None:
    execute_ttl_ddl(operations, operation.sql)
