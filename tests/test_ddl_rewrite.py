"""TTL DDL rewriting, pure (no database): the corpus, positions, byte identity, USING TTL."""

from __future__ import annotations

import importlib
from pathlib import Path

import pglast
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pg_ttl
from pg_ttl.ddl import TtlDdlError, rewrite, rewrite_statements
from pg_ttl.ddl import options as opts
from pg_ttl.install import code_layer_files

CORPUS = Path(__file__).parent / "ddl_corpus"
VALID = sorted(p for p in CORPUS.glob("*.sql") if not p.name.endswith(".expected.sql")
               and p.with_name(p.name[:-4] + ".expected.sql").exists())
INVALID = sorted(p for p in CORPUS.glob("*.sql") if p.with_name(p.name[:-4] + ".error.txt").exists())

# What surrounds a statement with USING TTL: the override in force before it comes back after it.
SAVE = ("SELECT pg_catalog.set_config('pg_ttl.row_ttl_before', "
        "COALESCE(pg_catalog.current_setting('pg_ttl.row_ttl', TRUE), ''), TRUE)")
END = "SELECT pg_catalog.set_config('pg_ttl.row_ttl', pg_catalog.current_setting('pg_ttl.row_ttl_before'), TRUE)"


def test_corpus_is_complete() -> None:
    inputs = [p for p in CORPUS.glob("*.sql") if not p.name.endswith(".expected.sql")]
    assert len(inputs) == len(VALID) + len(INVALID) >= 40
    assert len(INVALID) >= 20 and len(VALID) >= 15


@pytest.mark.parametrize("case", VALID, ids=lambda p: p.stem)
def test_corpus_rewrites(case: Path) -> None:
    expected = case.with_name(case.name[:-4] + ".expected.sql").read_text()
    out = rewrite(case.read_text(), "case.sql")
    assert out == expected
    # What comes out is plain PostgreSQL without TTL DDL: rewriting it again changes nothing.
    assert rewrite(out) == out


@pytest.mark.parametrize("case", INVALID, ids=lambda p: p.stem)
def test_corpus_errors(case: Path) -> None:
    expected = case.with_name(case.name[:-4] + ".error.txt").read_text().strip()
    with pytest.raises(TtlDdlError) as err:
        rewrite(case.read_text(), "case.sql")
    got = str(err.value)
    # The list of accepted options grows with the catalog; the message before it is pinned.
    cut = " (hint: accepted options: "
    if cut in expected:
        assert got.startswith(expected.split(cut)[0] + cut) and "ttl_expire_after" in got.split(cut)[1]
    else:
        assert got == expected


def test_exported_from_package() -> None:
    statement = "ALTER TABLE events SET (ttl_expire_after = '7 days')"
    assert pg_ttl.rewrite(statement) == rewrite(statement) != statement
    assert "rewrite" in pg_ttl.__all__


def test_commands_start_without_parser_or_alembic() -> None:
    """pg_ttl and its CLI import neither pglast nor alembic until a command needs them (start-up time)."""
    import subprocess
    import sys

    code = ("import sys, pg_ttl.cli; pg_ttl.cli.build_parser(); "
            "print(sorted(m for m in ('pglast', 'alembic', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_code_layer_passes_through_byte_identical() -> None:
    """Large real SQL (PL/pgSQL, dollar quotes, comments) comes out unchanged."""
    for path in code_layer_files():
        text = path.read_text()
        assert rewrite(text) == text, path.name


def test_only_the_changed_statement_is_printed_again() -> None:
    sql = ("CREATE TABLE a (x  int);  -- odd   spacing stays\n"
           "ALTER TABLE a SET (ttl_pause = true);\n"
           "select   'é' ;\n")
    out = rewrite(sql)
    assert out == ("CREATE TABLE a (x  int);  -- odd   spacing stays\n"
                   "SELECT ttl.set_options('a', CAST('{\"pause\": \"true\"}' AS jsonb));\n"
                   "select   'é' ;\n")


def test_error_positions_count_characters_not_bytes() -> None:
    sql = "SELECT 'ééé';  SELECT 'ü';\n  /* ß */ ALTER TABLE t SET (ttl_pause = 'kaputt');"
    with pytest.raises(TtlDdlError) as err:
        rewrite(sql, "m.sql")
    assert (err.value.line, err.value.column) == (2, 11)
    assert str(err.value).startswith("m.sql:2:11: value of \"ttl_pause\" must be a boolean")


def test_statements_keep_their_source_and_position() -> None:
    sql = "SELECT 1;\n\n   ALTER TABLE t RESET (ttl)\n"
    sts = rewrite_statements(sql, "x.sql")
    assert [(s.line, s.column, s.changed) for s in sts] == [(1, 1, False), (3, 4, True)]
    assert sts[1].source == "ALTER TABLE t RESET (ttl)"
    assert sts[1].output == ["SELECT ttl.disable('t')"]


def test_table_names_are_quoted_as_regclass_text() -> None:
    out = rewrite('ALTER TABLE "Sales"."Q1 ""final""" SET (ttl_expire_after = \'1 day\', ttl_column = \'d\');')
    stmt = pglast.parse_sql(out)[0].stmt
    table_literal = stmt.targetList[0].val.args[0].val.sval
    assert table_literal == '"Sales"."Q1 ""final"""'
    assert "'\"Sales\".\"Q1 \"\"final\"\"\"'" in out


def test_values_with_quotes_and_backslashes_round_trip() -> None:
    expr = "coalesce(expire_at, 'it''s \\ late'::timestamptz)"
    sql = "ALTER TABLE s SET (ttl_expiration_expression = " + "'" + expr.replace("'", "''") + "');"
    out = rewrite(sql)
    arg = pglast.parse_sql(out)[0].stmt.targetList[0].val.args[1].arg.val.sval
    import json

    assert json.loads(arg) == {"expiration_expression": expr}


def test_using_ttl_is_found_by_the_scanner_only() -> None:
    # Inside literals, comments and identifiers it is not a clause.
    sql = "INSERT INTO t VALUES ('USING TTL 5') /* USING TTL 5 */;\nINSERT INTO \"USING\" VALUES (1);\n"
    assert rewrite(sql) == sql
    out = rewrite("insert into t values (1) using ttl 86400 returning *;")
    assert out == (f"{SAVE};\nSELECT ttl.using_ttl(CAST('86400 seconds' AS interval), CAST('t' AS regclass));\n"
                   f"insert into t values (1) returning *;\n{END};")


def test_using_ttl_with_cte_and_comment() -> None:
    sql = "WITH v AS (SELECT 1 AS a) INSERT INTO t SELECT a FROM v USING /* cql */ TTL 30"
    out = rewrite(sql)
    assert out.splitlines() == [f"{SAVE};",
                                "SELECT ttl.using_ttl(CAST('30 seconds' AS interval), CAST('t' AS regclass));",
                                "WITH v AS (SELECT 1 AS a) INSERT INTO t SELECT a FROM v;",
                                END]


def test_using_ttl_takes_whole_numbers_beyond_int4() -> None:
    # 9999999999 lexes as a float constant in PostgreSQL (too large for int4): still seconds.
    out = rewrite("INSERT INTO t VALUES (1) USING TTL 9999999999")
    assert "'9999999999 seconds'" in out
    with pytest.raises(TtlDdlError, match=r"whole number of seconds .*, got '1\.5'"):
        rewrite("INSERT INTO t VALUES (1) USING TTL 1.5")
    with pytest.raises(TtlDdlError, match=r"whole number of seconds .*, got '1e3'"):
        rewrite("INSERT INTO t VALUES (1) USING TTL 1e3")


def test_using_ttl_rest_must_parse() -> None:
    with pytest.raises(TtlDdlError, match=r"f.sql:1:\d+: syntax error"):
        rewrite("INSERT INTO t VALUES (1 USING TTL 5", "f.sql")
    with pytest.raises(TtlDdlError, match="one USING TTL clause"):
        rewrite("UPDATE t USING TTL 5 SET a = 1 USING TTL 6")
    with pytest.raises(TtlDdlError, match="whole number of seconds"):
        rewrite("UPDATE t USING TTL -5 SET a = 1")


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(TtlDdlError) as err:
        rewrite("ALTER TABLE t SET (ttl_expires = '1 day')")
    assert err.value.hint is not None
    for key in opts.OPTIONS:
        assert "ttl_" + key in err.value.hint


def test_rate_limit_zero_means_unlimited_and_is_accepted() -> None:
    out = rewrite("ALTER TABLE t SET (ttl_select_rate_limit = 0, ttl_delete_rate_limit = 0)")
    assert '"select_rate_limit": "0"' in out and '"delete_rate_limit": "0"' in out


def test_reset_ttl_with_other_options_is_refused() -> None:
    with pytest.raises(TtlDdlError, match="RESET \\(ttl\\) removes the whole TTL"):
        rewrite("ALTER TABLE t RESET (ttl, ttl_pause)")
    with pytest.raises(TtlDdlError, match="both set and reset"):
        rewrite("ALTER TABLE t SET (ttl_pause = true), RESET (ttl_pause)")


def test_ttl_on_is_accepted_like_cockroachdb() -> None:
    out = rewrite("CREATE TABLE t (a date) WITH (ttl = 'on', ttl_expire_after = '1 day', ttl_column = 'a')")
    assert '"expire_after": "1 day"' in out and "ttl\"" not in out


@pytest.mark.parametrize("value", ["30 days", "1 day 2 hours", "PT1H", "P30D", "P1Y2M3DT4H5M6S", "10",
                                   "1h30m", "@ 1 day", "2 weeks", "1 mon", "1.5 hours", "01:00:00",
                                   "1-2", "P0001-02-03T04:05:06", "3 4:05:06", "1 millisecond",
                                   "2 DAYS", "1 day -1 hour", "1 year 2 months"])
def test_interval_forms_postgres_accepts_pass(value: str) -> None:
    opts.check_interval("expire_after", value)


@pytest.mark.parametrize("value", ["", "  ", "banana", "30 dayz", "P", "1 day ago", "-1 hour",
                                   "P1H", "1 day; drop", "1 (day)"])
def test_interval_forms_refused(value: str) -> None:
    with pytest.raises(opts.OptionError):
        opts.check_interval("expire_after", value)


@pytest.mark.parametrize("value", ["0", "0 seconds", "PT0S"])
def test_zero_expires_a_table_row_at_its_column_time_but_not_a_column_value(value: str) -> None:
    opts.check_interval("expire_after", value)  # the database refuses it without ttl_column
    with pytest.raises(opts.OptionError, match="greater than zero"):
        opts.check_column_option("expire_after", value)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz0123456789 -+.:@PTHMSDYW'\";()")),
               max_size=30))
def test_rewrite_never_crashes_on_option_values(value: str) -> None:
    """Whatever the value, the rewrite either refuses it with a positioned error
    or produces SQL that parses back to the same option value."""
    literal = "'" + value.replace("'", "''") + "'"
    for key in opts.OPTIONS:
        sql = f"ALTER TABLE t SET (ttl_{key} = {literal})"
        try:
            out = rewrite(sql, "h.sql")
        except TtlDdlError as exc:
            assert str(exc).startswith("h.sql:1:1: ")
            continue
        import json

        arg = pglast.parse_sql(out)[0].stmt.targetList[0].val.args[1].arg.val.sval
        assert json.loads(arg) == {key: value}


def test_a_rewrite_that_does_not_parse_back_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-parse check is real: a printer that drifts from the AST is caught."""
    module = importlib.import_module("pg_ttl.ddl.rewrite")  # the module, not the function of that name

    class Drifting:
        def __call__(self, node: object) -> str:
            return "SELECT ttl.set_options('other_table', '{}')"

    monkeypatch.setattr(module, "RawStream", Drifting)
    with pytest.raises(AssertionError, match="does not parse back to the statements meant"):
        rewrite("ALTER TABLE t SET (ttl_pause = true)", "d.sql")
    # Statements without TTL DDL are never printed, so they are unaffected.
    assert rewrite("SELECT 1; -- x\n") == "SELECT 1; -- x\n"
