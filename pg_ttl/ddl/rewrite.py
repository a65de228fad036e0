"""TTL DDL -> plain PostgreSQL, with pglast's parser and printer.

``CREATE TABLE ... WITH (ttl_...)`` and ``ALTER TABLE ... SET/RESET (ttl_...)``
become the same statements without the TTL options plus calls of the SQL API
(``ttl.set_options``, ``ttl.reset_options``, ``ttl.disable``,
``ttl.enable_column``, ``ttl.disable_column``); YDB's ``TTL = Interval(...) ON
col`` is read as those options first (pg_ttl/ddl/ydb.py). CQL's ``INSERT/UPDATE ...
USING TTL n`` becomes ``SELECT ttl.using_ttl('n seconds')`` before the
statement. Every other statement is copied byte for byte from the input; only
changed statements are printed again (by pglast), and the result is parsed
again and compared with what was meant before anyone runs it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pglast
from pglast import ast
from pglast.enums import AlterTableType, ObjectType, TransactionStmtKind
from pglast.stream import RawStream
from pglast.visitors import Visitor

from pg_ttl.ddl import options as opts
from pg_ttl.ddl import ydb
from pg_ttl.ddl.options import OptionError

# The SQL that TTL DDL turns into; $n are filled in as literals (in the AST, by
# pglast, never by string formatting).
_SET_OPTIONS = "SELECT ttl.set_options($1, CAST($2 AS jsonb))"
_SET_OPTIONS_IF_NEW = ("SELECT ttl.set_options($1, CAST($2 AS jsonb)) WHERE NOT EXISTS "
                       "(SELECT 1 FROM ttl.policies WHERE relid = CAST($1 AS regclass))")
# Orphan options alone (docs/orphans.md): the table's orphan policy is what must not exist yet.
_SET_ORPHAN_OPTIONS_IF_NEW = ("SELECT ttl.set_options($1, CAST($2 AS jsonb)) WHERE NOT EXISTS "
                              "(SELECT 1 FROM ttl.orphan_policy WHERE relid = CAST($1 AS regclass))")
_RESET_OPTIONS = "SELECT ttl.reset_options($1, VARIADIC CAST($2 AS text[]))"
# SET and RESET in one ALTER TABLE: one change, so that what is reset is gone
# when what is set is checked (ttl_column reset, ttl_expiration_expression set).
# The options reset take their defaults from the database's registry.
_SET_AND_RESET_OPTIONS = ("SELECT ttl.set_options($1, CAST($2 AS jsonb) || COALESCE("
                          "(SELECT pg_catalog.jsonb_object_agg(o.name, o.default_value) FROM ttl.options AS o "
                          "WHERE o.name = ANY (CAST($3 AS text[]))), CAST('{}' AS jsonb)))")
_DISABLE = "SELECT ttl.disable($1)"
_ENABLE_COLUMN = "SELECT ttl.enable_column($1, $2, $3)"
_ENABLE_COLUMN_RELATIVE = "SELECT ttl.enable_column($1, $2, $3, $4)"
_DISABLE_COLUMN = "SELECT ttl.disable_column($1, $2)"
# With the table (and an UPDATE's columns): refused where nothing keeps a TTL per write.
_USING_TTL_INSERT = "SELECT ttl.using_ttl(CAST($1 AS interval), CAST($2 AS regclass))"
_USING_TTL_UPDATE = "SELECT ttl.using_ttl(CAST($1 AS interval), CAST($2 AS regclass), CAST($3 AS name[]))"
# CQL's USING TTL applies to its statement only: afterwards the override the
# transaction (or session) had before applies again. RESET would not do: it
# drops a transaction's override and, committed, the session's too.
_USING_TTL_SAVE = ("SELECT pg_catalog.set_config('pg_ttl.row_ttl_before', "
                   "COALESCE(pg_catalog.current_setting('pg_ttl.row_ttl', true), ''), true)")
_USING_TTL_END = ("SELECT pg_catalog.set_config('pg_ttl.row_ttl', "
                  "pg_catalog.current_setting('pg_ttl.row_ttl_before'), true)")
# ALTER TABLE IF EXISTS: a missing table is skipped, as PostgreSQL does ($1 is
# then pg_catalog.to_regclass('table')).
_IF_TABLE = " WHERE $1 IS NOT NULL"

_TRANSACTION_CONTROL = {
    TransactionStmtKind.TRANS_STMT_BEGIN, TransactionStmtKind.TRANS_STMT_START,
    TransactionStmtKind.TRANS_STMT_COMMIT, TransactionStmtKind.TRANS_STMT_ROLLBACK,
    TransactionStmtKind.TRANS_STMT_PREPARE, TransactionStmtKind.TRANS_STMT_COMMIT_PREPARED,
    TransactionStmtKind.TRANS_STMT_ROLLBACK_PREPARED,
}


class TtlDdlError(ValueError):
    """A statement that cannot be rewritten; str() is ``file:line:col: message``."""

    def __init__(self, message: str, filename: str = "<input>", line: int = 1, column: int = 1,
                 hint: str | None = None) -> None:
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.filename}:{self.line}:{self.column}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


@dataclass
class Statement:
    """One statement of the input and what it becomes."""

    start: int  # character offsets of the statement in the input (no trailing ';')
    end: int
    line: int
    column: int
    source: str
    output: list[str] = field(default_factory=list)  # statements to run, without ';'
    changed: bool = False
    transaction_control: bool = False  # BEGIN, COMMIT, ROLLBACK ...
    expected: list[Any] = field(default_factory=list, repr=False)  # the AST each output must parse to


def rewrite(sql: str, filename: str = "<input>") -> str:
    """Plain PostgreSQL for ``sql`` (pure: no database). Raises TtlDdlError."""
    sql = ydb.translate(sql, filename)
    statements = rewrite_statements(sql, filename)
    return render(sql, statements)


def render(sql: str, statements: Sequence[Statement]) -> str:
    """The input with each changed statement replaced; everything else untouched."""
    out: list[str] = []
    pos = 0
    for st in statements:
        if not st.changed:
            continue
        out.append(sql[pos:st.start])
        out.append(";\n".join(st.output))
        pos = st.end
    out.append(sql[pos:])
    return "".join(out)


def rewrite_statements(sql: str, filename: str = "<input>") -> list[Statement]:
    """Every statement of ``sql`` with its rewrite; raises TtlDdlError at the first problem.
    YDB's TTL clause is read first (pg_ttl.ddl.ydb): offsets are those of that text."""
    sql = ydb.translate(sql, filename)
    lines = _LineIndex(sql)
    try:
        tokens = pglast.parser.scan(sql)
    except pglast.parser.ParseError as exc:
        raise _parse_error(exc, filename, lines) from None
    clauses = _find_using_ttl(sql, tokens, filename, lines)
    work = _blank(sql, clauses)
    try:
        raws = pglast.parse_sql(work)
    except pglast.parser.ParseError as exc:
        raise _parse_error(exc, filename, lines) from None
    code_ends = [t.end + 1 for t in tokens if t.name not in ("SQL_COMMENT", "C_COMMENT")]

    statements: list[Statement] = []
    for raw in raws:
        start = raw.stmt_location or 0
        limit = start + raw.stmt_len if raw.stmt_len else len(sql)
        end = max((e for e in code_ends if start < e <= limit), default=limit)
        line, column = lines.position(start)
        st = Statement(start=start, end=end, line=line, column=column, source=sql[start:end])
        st.transaction_control = (isinstance(raw.stmt, ast.TransactionStmt)
                                  and raw.stmt.kind in _TRANSACTION_CONTROL)
        mine = [c for c in clauses if start <= c.start < end]
        assert raw.stmt is not None
        try:
            if mine:
                _rewrite_using_ttl(st, raw.stmt, mine)
            else:
                _rewrite_ddl(st, raw.stmt)
        except OptionError as exc:
            raise TtlDdlError(str(exc), filename, line, column, exc.hint) from None
        if st.changed:
            _verify(st, filename)
        else:
            st.output = [st.source]
        statements.append(st)
    _verify_whole(sql, statements, filename)
    return statements


# ------------------------------------------------------------------ positions

class _LineIndex:
    def __init__(self, text: str) -> None:
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def position(self, offset: int) -> tuple[int, int]:
        """1-based line and column (in characters) of an offset."""
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1


def _parse_error(exc: pglast.parser.ParseError, filename: str, lines: _LineIndex) -> TtlDdlError:
    message = str(exc.args[0]) if exc.args else str(exc)
    offset = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
    line, column = lines.position(offset)
    return TtlDdlError(message, filename, line, column)


# ------------------------------------------------------------------ USING TTL

@dataclass
class _Clause:
    start: int  # offsets of "USING TTL n" in the input
    end: int
    seconds: int


def _find_using_ttl(sql: str, tokens: Sequence[Any], filename: str, lines: _LineIndex) -> list[_Clause]:
    """``USING TTL <integer>`` in the token stream (never valid PostgreSQL, so it
    cannot be mistaken for DELETE ... USING or MERGE ... USING)."""
    code = [t for t in tokens if t.name not in ("SQL_COMMENT", "C_COMMENT")]
    found: list[_Clause] = []
    for i, tok in enumerate(code[:-1]):
        if tok.name != "USING":
            continue
        nxt = code[i + 1]
        if nxt.name != "IDENT" or sql[nxt.start:nxt.end + 1].lower() != "ttl":
            continue
        value = code[i + 2] if i + 2 < len(code) else None
        # DELETE ... USING ttl WHERE / MERGE ... USING ttl ON: a table named ttl.
        if value is None or value.name not in ("ICONST", "FCONST", "SCONST", "ASCII_45", "PARAM"):
            continue
        text = sql[value.start:value.end + 1]
        # A whole number too large for int4 lexes as FCONST: still a whole number.
        if value.name != "ICONST" and not (value.name == "FCONST" and text.isdigit()):
            last = code[i + 3] if value.name == "ASCII_45" and i + 3 < len(code) else value
            shown = sql[value.start:last.end + 1]
            line, column = lines.position(tok.start)
            raise TtlDdlError(f"USING TTL needs a whole number of seconds (0 = never expires), got '{shown}'",
                              filename, line, column, hint="e.g. INSERT ... USING TTL 86400")
        # PostgreSQL's integer literals: decimal, or 0x / 0o / 0b (with '_' between digits).
        found.append(_Clause(tok.start, value.end + 1, int(text, 0) if text[:2].lower() in ("0x", "0o", "0b")
                             else int(text)))
    return found


def _blank(sql: str, clauses: Sequence[_Clause]) -> str:
    """The input with each USING TTL clause replaced by spaces, so that offsets stay."""
    if not clauses:
        return sql
    chars = list(sql)
    for c in clauses:
        for i in range(c.start, c.end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def _cut(st: Statement, clause: _Clause) -> str:
    left = st.source[:clause.start - st.start].rstrip(" \t")
    right = st.source[clause.end - st.start:].lstrip(" \t")
    if left.endswith("\n") and right[:1] in ("\r", "\n"):
        right = right[2:] if right.startswith("\r\n") else right[1:]  # the clause's own line goes
    joiner = "" if not right or right[0] in "\r\n" or left.endswith("\n") or not left else " "
    return left + joiner + right


def _rewrite_using_ttl(st: Statement, stmt: ast.Node, clauses: Sequence[_Clause]) -> None:
    if len(clauses) > 1:
        raise OptionError("a statement can have one USING TTL clause")
    if not isinstance(stmt, ast.InsertStmt | ast.UpdateStmt):
        raise OptionError("USING TTL applies to INSERT and UPDATE only")
    clause = clauses[0]
    if stmt.relation is None:
        raise OptionError("USING TTL needs the statement's table")
    table = _relation_text(stmt.relation)
    _emit(st, _build(_USING_TTL_SAVE))
    if isinstance(stmt, ast.InsertStmt):
        _emit(st, _build(_USING_TTL_INSERT, f"{clause.seconds} seconds", table))
    else:
        columns = [str(t.name) for t in stmt.targetList or () if isinstance(t, ast.ResTarget) and t.name]
        _emit(st, _build(_USING_TTL_UPDATE, f"{clause.seconds} seconds", table, _name_array(columns)))
    st.output.append(_cut(st, clause))
    st.expected.append(stmt)
    _emit(st, _build(_USING_TTL_END))
    st.changed = True


def _name_array(names: Sequence[str]) -> str:
    """A PostgreSQL array literal of names: '{"a","b"}'."""
    quoted = ('"' + n.replace("\\", "\\\\").replace('"', '\\"') + '"' for n in names)
    return "{" + ",".join(quoted) + "}"


# ------------------------------------------------------------------ TTL DDL

def _relation_text(rv: ast.RangeVar) -> str:
    """The table as regclass text, identifiers quoted where needed: '"My Table"'."""
    plain = ast.RangeVar(catalogname=rv.catalogname, schemaname=rv.schemaname, relname=rv.relname,
                         inh=True, relpersistence="p")
    return str(RawStream()(plain))


def _split(elems: Sequence[ast.DefElem] | None) -> tuple[list[ast.DefElem], list[ast.DefElem]]:
    """(TTL options, real storage parameters)."""
    ttl: list[ast.DefElem] = []
    real: list[ast.DefElem] = []
    for e in elems or ():
        (ttl if e.defnamespace is None and opts.is_ttl_name(str(e.defname)) else real).append(e)
    return ttl, real


def _set_values(elems: Sequence[ast.DefElem]) -> dict[str, str]:
    """Checked ``key -> value`` of ``SET (...)`` / ``WITH (...)`` TTL options."""
    values: dict[str, str] = {}
    for e in elems:
        name = str(e.defname).lower()
        text = opts.value_text(e)
        if name == "ttl":
            opts.check_ttl_switch(text)
            continue
        if name == opts.CQL_DEFAULT_TTL:
            for key, value in opts.cql_default_ttl(text).items():
                if key in values and values[key] != value:
                    raise OptionError(f"\"{opts.CQL_DEFAULT_TTL}\" sets {opts.label(key)}, which is given too")
                values[key] = value
            continue
        key = opts.key_of(name)
        if key in values:
            raise OptionError(f"option {opts.label(key)} is given more than once")
        values[key] = opts.check(key, text)
    if "column" in values and "expiration_expression" in values:
        raise OptionError('set either "ttl_column" or "ttl_expiration_expression", not both')
    if "expire_after" in values and "expiration_expression" in values:
        raise OptionError('"ttl_expire_after" does not apply with "ttl_expiration_expression"',
                          hint="the expression gives the expiry time itself")
    return values


def _reset_keys(elems: Sequence[ast.DefElem]) -> list[str]:
    keys: list[str] = []
    for e in elems:
        name = str(e.defname).lower()
        if e.arg is not None:
            raise OptionError(f"RESET takes option names only, got a value for \"{name}\"")
        if name == opts.CQL_DEFAULT_TTL:
            raise OptionError(f"\"{opts.CQL_DEFAULT_TTL}\" is not reset: set it to 0 for no default TTL",
                              hint="RESET (ttl) removes the whole TTL")
        key = "ttl" if name == "ttl" else opts.key_of(name)
        if key not in keys:
            keys.append(key)
    return keys


def _rewrite_ddl(st: Statement, stmt: ast.Node) -> None:
    if isinstance(stmt, ast.CreateStmt) and stmt.relation is not None:
        _rewrite_create(st, stmt, stmt.relation, stmt, bool(stmt.if_not_exists))
    elif isinstance(stmt, ast.CreateTableAsStmt) and stmt.into is not None and stmt.into.rel is not None:
        _rewrite_create(st, stmt, stmt.into.rel, stmt.into, bool(stmt.if_not_exists))
    elif isinstance(stmt, ast.AlterTableStmt):
        _rewrite_alter(st, stmt)


def _rewrite_create(st: Statement, stmt: ast.Node, rel: ast.RangeVar, holder: ast.CreateStmt | ast.IntoClause,
                    if_not_exists: bool) -> None:
    """``holder`` has the ``options``: the CreateStmt, or CREATE TABLE AS's IntoClause."""
    ttl, real = _split(holder.options)
    if not ttl:
        return
    if isinstance(stmt, ast.CreateTableAsStmt) and stmt.objtype != ObjectType.OBJECT_TABLE:
        raise OptionError("TTL options apply to tables only, not to materialized views")
    if rel.relpersistence == "t":
        raise OptionError("TTL cannot be set on a temporary table", hint="the worker cannot see temporary tables")
    if isinstance(stmt, ast.CreateStmt) and stmt.partbound is not None:
        raise OptionError("TTL is set on the partitioned table, not on a partition",
                          hint="every partition follows the partitioned table's TTL")
    values = _set_values(ttl)
    # An orphan policy stands on its own; every other option belongs to the table's TTL.
    orphans_only = bool(values) and all(k in opts.ORPHAN_OPTIONS for k in values)
    if not orphans_only and "expire_after" not in values and "expiration_expression" not in values:
        raise OptionError('"ttl_expire_after" and/or "ttl_expiration_expression" must be set')
    holder.options = tuple(real) or None
    table = _relation_text(rel)
    call = _SET_OPTIONS
    if if_not_exists:
        call = _SET_ORPHAN_OPTIONS_IF_NEW if orphans_only else _SET_OPTIONS_IF_NEW
    _emit(st, stmt)
    _emit(st, _build(call, table, json.dumps(values)))
    st.changed = True


def _rewrite_alter(st: Statement, stmt: ast.AlterTableStmt) -> None:
    table_cmds = (AlterTableType.AT_SetRelOptions, AlterTableType.AT_ResetRelOptions)
    column_cmds = (AlterTableType.AT_SetOptions, AlterTableType.AT_ResetOptions)
    kept: list[ast.AlterTableCmd] = []
    set_elems: list[ast.DefElem] = []
    reset_elems: list[ast.DefElem] = []
    column_calls: list[tuple[str, ...]] = []
    found = False
    for cmd in stmt.cmds or ():
        if not isinstance(cmd, ast.AlterTableCmd) or cmd.subtype not in table_cmds + column_cmds:
            kept.append(cmd)
            continue
        ttl, real = _split(cmd.def_ if isinstance(cmd.def_, tuple) else None)
        if not ttl:
            kept.append(cmd)
            continue
        found = True
        if stmt.objtype != ObjectType.OBJECT_TABLE:
            raise OptionError("TTL options apply to tables only (ALTER TABLE)")
        if real:
            cmd.def_ = tuple(real)
            kept.append(cmd)
        if cmd.subtype == AlterTableType.AT_SetRelOptions:
            set_elems.extend(ttl)
        elif cmd.subtype == AlterTableType.AT_ResetRelOptions:
            reset_elems.extend(ttl)
        else:
            column_calls.append(_column_call(cmd, ttl))
    if not found or stmt.relation is None:
        return
    table = _relation_text(stmt.relation)
    where = ""
    target: str | ast.Node = table
    if stmt.missing_ok:
        # The table argument as to_regclass(): a literal would be cast to
        # regclass (and fail) before WHERE could skip the missing table.
        where = _IF_TABLE
        select = _build("SELECT pg_catalog.to_regclass($1)", table)
        assert isinstance(select, ast.SelectStmt) and select.targetList
        target = select.targetList[0].val
    # What removes TTL runs before the statement's other commands (RESET (ttl),
    # DROP COLUMN at: the column is no longer the policy's), what sets it after
    # them (ADD COLUMN at, SET (ttl_column = 'at')).
    before: list[ast.Node] = []
    calls: list[ast.Node] = []
    values = _set_values(set_elems) if set_elems else {}
    keys = _reset_keys(reset_elems) if reset_elems else []
    if "ttl" in keys:
        if len(keys) > 1 or set_elems:
            raise OptionError("RESET (ttl) removes the whole TTL; give it without other TTL options")
        before.append(_build(_DISABLE + where, target))
    elif values and keys:
        both = set(keys) & set(values)
        if both:
            raise OptionError(f"option {opts.label(sorted(both)[0])} is both set and reset")
        # Tiers and orphan options are not in the table's registry: reset on their own, first.
        apart = [k for k in keys if k not in opts.OPTIONS]
        if apart:
            before.append(_build(_RESET_OPTIONS + where, target, "{" + ",".join(apart) + "}"))
        calls.append(_build(_SET_AND_RESET_OPTIONS + where, target, json.dumps(values),
                            "{" + ",".join(k for k in keys if k in opts.OPTIONS) + "}"))
    elif keys:
        before.append(_build(_RESET_OPTIONS + where, target, "{" + ",".join(keys) + "}"))
    elif set_elems:
        calls.append(_build(_SET_OPTIONS + where, target, json.dumps(values)))
    seen: dict[str, str] = {}
    for kind, column, *_ in column_calls:
        if seen.setdefault(column, kind) != kind:
            raise OptionError(f'column "{column}": its TTL is both set and reset')
    for kind, *args in column_calls:
        if kind == "disable":
            before.append(_build(_DISABLE_COLUMN + where, target, *args))
        else:
            template = _ENABLE_COLUMN_RELATIVE if len(args) == 3 else _ENABLE_COLUMN
            calls.append(_build(template + where, target, *args))
    for call in before:
        _emit(st, call)
    if kept:
        stmt.cmds = tuple(kept)
        _emit(st, stmt)
    for call in calls:
        _emit(st, call)
    st.changed = True


def _column_call(cmd: ast.AlterTableCmd, ttl: Sequence[ast.DefElem]) -> tuple[str, ...]:
    column = str(cmd.name)
    if cmd.subtype == AlterTableType.AT_SetOptions:
        values: dict[str, str] = {}
        for e in ttl:
            name = str(e.defname).lower()
            text = opts.value_text(e)
            if name == "ttl":
                opts.check_ttl_switch(text)
                continue
            key = opts.column_key_of(name)
            opts.check_column_option(key, text)
            if key in values:
                raise OptionError(f"option {opts.label(key)} is given more than once")
            values[key] = text
        if "expire_after" not in values:
            raise OptionError(f'column "{column}": "ttl_expire_after" must be set')
        if "relative_to" in values:
            return ("enable", column, values["expire_after"], values["relative_to"])
        return ("enable", column, values["expire_after"])
    for e in ttl:
        name = str(e.defname).lower()
        if e.arg is not None:
            raise OptionError(f"RESET takes option names only, got a value for \"{name}\"")
        if name != "ttl" and opts.column_key_of(name) != "expire_after":
            raise OptionError(f"{opts.label(opts.column_key_of(name))} cannot be reset on its own",
                              hint="remove a column's TTL with ALTER COLUMN ... RESET (ttl)")
    return ("disable", column)


# ------------------------------------------------------------------ printing and checking

class _Fill(Visitor):
    """Replaces $n parameters of a template with string literals."""

    def __init__(self, values: Sequence[str | ast.Node]) -> None:
        super().__init__()
        self.values = values

    def visit_ParamRef(self, ancestors: Any, node: ast.ParamRef) -> ast.Node:
        value = self.values[(node.number or 0) - 1]
        return value if isinstance(value, ast.Node) else ast.A_Const(isnull=False, val=ast.String(sval=value))


def _build(template: str, *values: str | ast.Node) -> ast.Node:
    tree = pglast.parse_sql(template)[0].stmt
    assert tree is not None
    filled: ast.Node = _Fill(values)(tree)
    return filled


def _emit(st: Statement, node: ast.Node) -> None:
    st.output.append(str(RawStream()(node)))
    st.expected.append(node)


def _verify(st: Statement, filename: str) -> None:
    """Parse the rewrite again: exactly the statements meant, in order."""
    where = f"{filename}:{st.line}:{st.column}"
    text = ";\n".join(st.output)
    try:
        parsed = [r.stmt for r in pglast.parse_sql(text)]
    except pglast.parser.ParseError as exc:
        raise AssertionError(f"{where}: the rewrite does not parse ({exc}): {text}") from None
    if parsed != st.expected:
        raise AssertionError(f"{where}: the rewrite does not parse back to the statements meant: {text}")


def _verify_whole(sql: str, statements: Sequence[Statement], filename: str) -> None:
    if not any(st.changed for st in statements):
        return
    text = render(sql, statements)
    expected = sum(len(st.output) for st in statements)
    got = len(pglast.parse_sql(text))
    if got != expected:
        raise AssertionError(f"{filename}: the rewritten file has {got} statements, not {expected}")
