"""Key windows and the planner's estimates (ranges.py, ttl.window_sql, ttl._constant_sql).

To estimate a comparison of an indexed column with a constant below its second histogram
bound, PostgreSQL reads the index's lowest live entry: past the entries of rows deleted
since, each a heap fetch, for every statement it plans (the planner does not mark them
dead; an index scan from the low end, or VACUUM, does). Key windows delete exactly
there, window after window, so each window's statements would walk the entries of all
the windows before. They hide their constants from those estimates. These tests hold
them to it, as the pages each statement's planning reads (EXPLAIN (BUFFERS)), and to
still being index scans."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import ranges, rows
from pg_ttl.expire.engine import Engine
from pg_ttl.expire.predicate import build_predicate, load_policies, window_forms
from tests.conftest import dsn_of

ROWS = 200_000
EXPIRED = 30_000  # the oldest keys: all in the first of four histogram bins
WINDOW = 2_000  # rows a window (delete_batch_size; a rate limit keeps every window at it)


def _table(db: psycopg.Connection[Any], name: str, correlated: bool = True, tied: bool = False) -> None:
    """ROWS rows a minute apart (keys in insertion order, or not), the oldest EXPIRED
    expired (``tied``: the newer half of them at one key); a histogram of four bins on the
    TTL column; key windows of WINDOW rows."""
    t = sql.Identifier(name)
    db.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)"
                       " WITH (autovacuum_enabled = off)").format(t))
    order = sql.SQL("g" if correlated else "md5(g::text)")
    minutes = sql.SQL("CASE WHEN g BETWEEN {} AND {} THEN {} ELSE g END" if tied else "g").format(
        EXPIRED // 2, EXPIRED, EXPIRED // 2)
    db.execute(sql.SQL("INSERT INTO {} SELECT g, timestamptz '2020-01-01' + {} * interval '1 min', repeat('x', 40)"
                       " FROM generate_series(1, %s::int) g ORDER BY {}").format(t, minutes, order), (ROWS,))
    db.execute(sql.SQL("CREATE INDEX ON {} (v)").format(t))
    db.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN v SET STATISTICS 4").format(t))
    db.execute(sql.SQL("ANALYZE {}").format(t))
    [age] = db.execute("SELECT now() - (timestamptz '2020-01-01' + %s * interval '1 min')",
                       (EXPIRED + 0.5,)).fetchone()
    db.execute("SELECT ttl.enable(%s, expire_after => %s, column_name => 'v', delete_batch_size => %s,"
               " delete_rate_limit => 100000000)", (name, age, WINDOW))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def _nodes(node: dict[str, Any]) -> list[str]:
    return [node["Node Type"]] + [n for child in node.get("Plans", []) for n in _nodes(child)]


def _planned(conn: psycopg.Connection[Any], statement: sql.Composable | str,
             params: tuple[Any, ...] | None = None, raw_params: tuple[Any, ...] | None = None) -> tuple[int, list[str]]:
    """The pages planning ``statement`` reads, and its plan's nodes (it is not run);
    ``raw_params``: its $1, $2 ... (a raw cursor, as the engine runs it)."""
    query = sql.SQL("EXPLAIN (BUFFERS, FORMAT JSON) {}").format(
        statement if isinstance(statement, sql.Composable) else sql.SQL(statement))
    if raw_params is not None:
        row = psycopg.RawCursor(conn).execute(query, raw_params).fetchone()
    else:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    [plan] = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return _planning_pages(plan), _nodes(plan["Plan"])


def _planning_pages(plan: dict[str, Any]) -> int:
    """The pages an EXPLAIN (BUFFERS)'s planning read (hit or read)."""
    planning = plan.get("Planning", {})
    return int(planning.get("Shared Hit Blocks", 0)) + int(planning.get("Shared Read Blocks", 0))


def _delete_a_window(db: psycopg.Connection[Any], table: str) -> None:
    """The next WINDOW rows deleted, as a window would."""
    t = sql.Identifier(table)
    [low] = db.execute(sql.SQL("SELECT min(v) FROM {}").format(t)).fetchone()
    db.execute(sql.SQL("DELETE FROM {} WHERE v < %s + %s * interval '1 min'").format(t), (low, WINDOW))
    db.commit()


def _one_walk(db: psycopg.Connection[Any], table: str) -> int:
    """What planning a statement with a constant of the first bin shown reads once the
    next WINDOW rows are deleted: what a window's statement would read to plan past
    the window before it."""
    _delete_a_window(db, table)
    pages, _ = _planned(db, sql.SQL("SELECT 1 FROM {} WHERE v < timestamptz '2020-01-02'").format(
        sql.Identifier(table)))
    db.rollback()
    return pages


def _explained(monkeypatch: pytest.MonkeyPatch, table: str) -> list[tuple[str, int, list[str]]]:
    """Each statement the engine runs on ``table``, with the pages its planning reads and
    its plan's nodes, EXPLAINed on the engine's connection just before it runs."""
    seen: list[tuple[str, int, list[str]]] = []
    original = ranges.execute
    # as the engine names the unit, or the database's statements do (ttl.key_rows_sql)
    names = re.compile(re.escape(sql.Identifier("public", table).as_string(None)) + rf"|\bpublic\.{table}\b")

    def explaining(ctx: Any, query: Any, reraise_lock: bool = False, raw_params: Any = None) -> Any:
        text = query if isinstance(query, str) else query.as_string(ctx.conn)
        if names.search(text):
            seen.append((text, *_planned(ctx.conn, query, raw_params=raw_params)))
        return original(ctx, query, reraise_lock, raw_params)

    monkeypatch.setattr(ranges, "execute", explaining)
    monkeypatch.setattr(rows, "execute", explaining)
    return seen


def _left(db: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = db.execute(sql.SQL("SELECT count(*) FILTER (WHERE id <= %s), count(*) FROM {}").format(
        sql.Identifier(table)), (EXPIRED,)).fetchone()
    db.commit()
    assert row is not None
    return int(row[0]), int(row[1])


def _pass_explained(db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, correlated: bool = True,
                    tied: bool = False) -> tuple[list[tuple[str, int, list[str]]], int]:
    """Table w's pass from an engine session that expired another table first (its catalogs
    cached: planning reads only the table), every statement on w EXPLAINed as it runs; and
    what planning past one window's entries reads (``_one_walk``)."""
    for name in ("warm", "w"):
        _table(db, name, correlated, tied=tied and name == "w")
    with Engine(dsn_of(db)) as engine:
        [res] = engine.expire(["warm"])
        assert res.status == "ok" and res.rows_deleted == EXPIRED
        seen = _explained(monkeypatch, "w")
        [res] = engine.expire(["w"])
    assert res.status == "ok" and res.rows_deleted == EXPIRED
    assert _left(db, "w") == (0, ROWS - EXPIRED)
    walk = _one_walk(db, "w")
    assert walk >= 10  # the measure can fail: a window's entries cost that many pages to plan past
    return seen, walk


@pytest.mark.parametrize("correlated", [True, False])
def test_window_statements_plan_without_walking_the_last_windows_entries(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, correlated: bool) -> None:
    """Fifteen windows, each read then deleted: no statement's planning walks the entries
    the windows before it left, and a window with a first key is still an index scan,
    its keys in insertion order or not."""
    seen, walk = _pass_explained(db, monkeypatch, correlated)
    windows = [(text, pages, nodes) for text, pages, nodes in seen if "DELETE FROM" in text]
    reads = [(text, pages, nodes) for text, pages, nodes in seen if "DELETE FROM" not in text]
    assert len(windows) >= EXPIRED // WINDOW and len(reads) >= EXPIRED // WINDOW
    assert [pages for _, pages, _ in windows + reads if pages >= walk / 2] == [], (walk, windows, reads)
    # (the first window, bounded by its end alone, shows it: the planner's choice to make)
    assert [nodes for _, _, nodes in windows[1:] + reads if "Seq Scan" in nodes] == []


def test_a_keys_ctid_windows_plan_without_walking_the_last_windows_entries(
        db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the expired rows at one key (a bulk load stamped with one now()), past key
    windows over the other half: the key's ctid windows delete at the index's low end too,
    one after the other; their statements, and the reads of the key's first and last rows,
    hide the cutoff and the key as key windows do; the windows are TID range scans."""
    seen, walk = _pass_explained(db, monkeypatch, tied=True)
    ctid_windows = [(text, pages, nodes) for text, pages, nodes in seen if "DELETE FROM" in text and "ctid" in text]
    assert len(ctid_windows) >= EXPIRED // 2 // WINDOW, seen
    assert [pages for _, pages, _ in ctid_windows if pages >= walk / 2] == [], (walk, ctid_windows)
    assert [nodes for _, _, nodes in ctid_windows if "Tid Range Scan" not in nodes] == []
    bounds = [(text, pages) for text, pages, _ in seen if "ORDER BY" in text and "DESC" in text]
    assert len(bounds) == 1 and [pages for _, pages in bounds if pages >= walk / 2] == [], (walk, bounds)


def test_call_run_window_statements_plan_without_walking_the_last_windows_entries(
        db: psycopg.Connection[Any]) -> None:
    """CALL ttl.run()'s statements (ttl.window_sql), planned as its EXECUTE ... USING plans
    them (with their values), right after a window's rows went: a window with a first key
    walks none of them and is an index scan; the first window's end shows."""
    _table(db, "w", correlated=False)
    end_sql, delete_sql = db.execute(
        "SELECT x.window_end, x.delete_window FROM ttl.window_sql('w'::regclass, 'w'::regclass, now()) x").fetchone()
    [opening_sql] = db.execute("SELECT x.delete_window FROM ttl.window_sql('w'::regclass, 'w'::regclass, now(),"
                               " opening => true) x").fetchone()
    db.commit()

    def planned(statement: str, first: str | None, then: str | int) -> tuple[int, list[str]]:
        """Planned as the procedure plans it: PL/pgSQL's EXECUTE ... USING its values."""
        cast = "bigint" if isinstance(then, int) else "text"
        row = db.execute(sql.SQL("SELECT pg_temp.explain(%s, %s, %s::{})").format(sql.SQL(cast)),
                         (statement, first, then)).fetchone()
        assert row is not None
        [plan] = row[0]
        return _planning_pages(plan), _nodes(plan["Plan"])

    for then in ("text", "bigint"):
        db.execute(sql.SQL("""CREATE FUNCTION pg_temp.explain(statement text, first text, next {}) RETURNS json
                              LANGUAGE plpgsql AS $$
                              DECLARE plan json;
                              BEGIN
                                  EXECUTE 'EXPLAIN (BUFFERS, FORMAT JSON) ' || statement INTO plan USING first, next;
                                  RETURN plan;
                              END $$""").format(sql.SQL(then)))
    db.commit()
    _delete_a_window(db, "w")
    # the first key left and one WINDOW rows on (computed: a scan of the index from its
    # low end would mark the deleted rows' entries dead, and the planner would skip them)
    first = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(minutes=WINDOW + 1)
    end = first + timedelta(minutes=WINDOW)
    within = [planned(end_sql, first.isoformat(), WINDOW), planned(delete_sql, first.isoformat(), end.isoformat())]
    opening = planned(opening_sql, None, end.isoformat())
    # the same entries, planned past with a constant shown (the measure can fail)
    walk, _ = _planned(db, "SELECT 1 FROM w WHERE v < timestamptz '2020-01-02'")
    db.rollback()
    assert walk >= 10
    assert [pages for pages, _ in within if pages >= walk / 2] == [], (walk, within)
    assert [nodes for _, nodes in within if "Seq Scan" in nodes] == []
    assert opening[0] > 0  # (its end shows: the planner reads the index for it)
    with psycopg.connect(dsn_of(db), autocommit=True) as conn:
        conn.execute("CALL ttl.run()")
    assert _left(db, "w") == (0, ROWS - EXPIRED)


def _estimate(db: psycopg.Connection[Any], statement: str) -> tuple[float, list[str]]:
    """The rows the planner expects ``statement`` (a window's DELETE, $1 and $2 NULL: no
    first key, no end) to delete, and its nodes, planned as EXECUTE ... USING plans it
    (pg_temp.explain: _explain_ranges)."""
    [[plan]] = db.execute("SELECT pg_temp.explain(%s, NULL, NULL)", (statement,)).fetchone()
    [scan] = [n for n in _plans(plan["Plan"]) if "Scan" in n["Node Type"]]
    return float(scan["Plan Rows"]), _nodes(plan["Plan"])


def test_call_run_first_window_shows_its_cutoff_as_pg_ttl_runs_does(db: psycopg.Connection[Any]) -> None:
    """A unit's first window (no checkpoint) is deleted by the run's own expiry, its cutoff
    shown to the planner, in CALL ttl.run() (ttl.window_sql's opening forms) as in pg-ttl
    run (ranges.window, the first window's expiry is the run's): with nothing expired, its
    DELETE is estimated at the rows below the cutoff, none, where the hidden cutoff is
    estimated to pass a third of the table (and at 10M rows the DELETE was JIT-compiled)."""
    _table(db, "w")
    cutoff = datetime(2019, 1, 1, tzinfo=UTC)  # before every row
    opening, later = db.execute(
        "SELECT o.delete_window, l.delete_window FROM ttl.window_sql('w', 'w', %(c)s, opening => true) o,"
        " ttl.window_sql('w', 'w', %(c)s) l", {"c": cutoff}).fetchone()
    _explain_ranges(db)
    opening_rows, opening_nodes = _estimate(db, opening)
    later_rows, _ = _estimate(db, later)
    assert opening_rows <= ROWS / 1000, opening_rows
    assert later_rows >= ROWS / 10, later_rows  # (hidden: what the first window was planned by before)
    assert "Index Scan" in opening_nodes
    # the same expiry as pg-ttl run's first window: the run's predicate, constants shown
    [policy] = load_policies(db)
    pred = build_predicate(db, policy, cutoff)
    assert pred.expired.as_string(db) in opening and "(SELECT " not in pred.expired.as_string(db)
    db.rollback()
    # and CALL ttl.run() deletes by it: the plans of its statements, as auto_explain shows them
    plans: list[dict[str, Any]] = []
    with psycopg.connect(dsn_of(db), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: plans.append(json.loads(d.message_primary.split("plan:", 1)[1]))
                                if d.message_primary and "plan:" in d.message_primary else None)
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice",
                        "SET auto_explain.log_format = json"):
            conn.execute(setting)
        conn.execute("CALL ttl.run('w', %s)", (cutoff,))
    assert db.execute("SELECT strategy, status, rows_deleted FROM ttl.run_unit").fetchall() == [("index", "ok", 0)]
    deletes = [p for p in plans if p["Query Text"].startswith("DELETE FROM ONLY")]
    assert len(deletes) == 1, [p["Query Text"] for p in plans]
    [scan] = [n for n in _plans(deletes[0]["Plan"]) if "Scan" in n["Node Type"]]
    assert scan["Plan Rows"] <= ROWS / 1000, scan


def test_call_run_key_ctid_windows_scan_the_range_with_the_key_a_constant(db: psycopg.Connection[Any]) -> None:
    """CALL ttl.run()'s statement for a key's ctid window (ttl.key_window_sql), planned as
    its EXECUTE ... USING plans it: a TID range scan, the key cast once as the statement is
    parsed (a cast of a parameter would be evaluated for every row the scan filters: a
    timestamp's input function is not immutable), and no index scan on the key, even with
    TID scans off (a bare comparison lets the planner scan every row of the key instead of
    the window's range)."""
    _table(db, "w", tied=True)
    key = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(minutes=EXPIRED // 2)
    [statement] = db.execute("SELECT delete_key_window FROM ttl.key_window_sql('w', 'w', now(), %s)",
                             (key.isoformat(),)).fetchone()
    _explain_ranges(db)
    [[plan]] = db.execute("SELECT pg_temp.explain(%s, '(100,0)', '(200,0)')", (statement,)).fetchone()
    [scan] = [n for n in _plans(plan["Plan"]) if n["Node Type"] == "Tid Range Scan"]
    assert "cstring" not in scan["Filter"] and "2020-01-11 10:00:00+00'::timestamp with time zone" in scan["Filter"]
    db.execute("SET LOCAL enable_tidscan = off")
    [[plan]] = db.execute("SELECT pg_temp.explain(%s, '(100,0)', '(200,0)')", (statement,)).fetchone()
    db.rollback()
    conditions = [n.get("Index Cond", "") for n in _plans(plan["Plan"])]
    assert not [c for c in conditions if "2020-01-11" in c], conditions


def _explain_ranges(db: psycopg.Connection[Any]) -> None:
    """pg_temp.explain(statement, lo, hi): ``statement``'s plan (with the pages its planning
    read) as PL/pgSQL's EXECUTE ... USING lo, hi plans it, as CALL ttl.run() runs a range."""
    db.execute("""CREATE FUNCTION pg_temp.explain(statement text, lo text, hi text) RETURNS json
                  LANGUAGE plpgsql AS $$
                  DECLARE plan json;
                  BEGIN
                      EXECUTE 'EXPLAIN (BUFFERS, FORMAT JSON) ' || statement INTO plan USING lo, hi;
                      RETURN plan;
                  END $$""")


def _plans(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [n for child in node.get("Plans", []) for n in _plans(child)]


def test_call_run_block_ranges_plan_without_walking_the_entries_deleted_before(db: psycopg.Connection[Any]) -> None:
    """A block range's statement (ttl.delete_rows_sql), planned as CALL ttl.run()'s EXECUTE
    ... USING plans each range anew, right after rows at the index's low end went (a sweep
    deletes there too when a table in random order has many rows at one old key): its
    cutoff hidden, its planning walks none of their entries."""
    _table(db, "w")
    [statement] = db.execute("SELECT ttl.delete_rows_sql('w', 'w', now())").fetchone()
    _explain_ranges(db)
    db.commit()
    _delete_a_window(db, "w")
    [[plan]] = db.execute("SELECT pg_temp.explain(%s, '(0,0)', '(10,0)')", (statement,)).fetchone()
    pages = _planning_pages(plan)
    db.rollback()
    walk = _one_walk(db, "w")  # (the next window's entries: a first walk leaves the ones it passed cheaper)
    assert walk >= 10 and pages < walk / 2, (pages, walk)
    assert "Tid Range Scan" in _nodes(plan["Plan"])


def test_window_forms_are_read_once_and_fall_back_when_the_policy_went(db: psycopg.Connection[Any]) -> None:
    """The hidden forms come from the database once a run (its own SQL, its constants in
    subqueries); a policy removed meanwhile leaves the run's own forms, not an error."""
    _table(db, "w")
    [policy] = load_policies(db)
    [cutoff] = db.execute("SELECT now()").fetchone()
    pred = build_predicate(db, policy, cutoff)
    expired, bound = window_forms(db, policy.relid, pred)
    assert bound is not None and "(SELECT " in bound.as_string(db) and "(SELECT " in expired.as_string(db)
    assert "(SELECT " not in pred.expired.as_string(db)
    db.execute("SELECT ttl.disable('w')")
    assert window_forms(db, policy.relid, pred) == (expired, bound)  # read once: kept
    gone = dataclasses.replace(pred, hidden=None)
    assert window_forms(db, policy.relid, gone) == (pred.expired, pred.bound)
    db.rollback()
