"""Hazards of per-row and per-value TTL found in review: each test names the property it guards."""

from __future__ import annotations

from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def test_second_using_ttl_write_of_a_tracked_value_in_one_transaction_keeps_the_row_ttl(db: Conn) -> None:
    """UPDATE ... USING TTL of a 'write' column TTL value gives the TTL to the value only, also when
    the same row's value is written twice in one transaction (its range is then unchanged)."""
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int, w int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    db.execute("SELECT ttl.set_option('pv', 'value_ttl_overrides_table_ttl', 'true')")
    db.execute("SELECT ttl.enable_column('pv', 'v', '1 day', 'write')")
    db.execute("INSERT INTO pv VALUES (1, 1, 1), (2, 1, 1)")
    with db.transaction():
        db.execute("SELECT ttl.using_ttl('10 seconds')")
        db.execute("UPDATE pv SET v = 2 WHERE id = 1")
        db.execute("UPDATE pv SET v = 2 WHERE id = 2")
        db.execute("UPDATE pv SET v = 3 WHERE id = 2")
        rows = db.execute("SELECT ttl_expires_at - now(), upper(ttl_cell_v) - now() FROM pv ORDER BY id").fetchall()
        # an UPDATE setting no tracked value still gives the statement's TTL to the row
        db.execute("UPDATE pv SET w = 5 WHERE id = 1")
        other = db.execute("SELECT ttl_expires_at - now() FROM pv WHERE id = 1").fetchone()
    assert [(r[0].total_seconds(), r[1].total_seconds()) for r in rows] == [(86400, 10), (86400, 10)]
    assert other is not None and other[0].total_seconds() == 10


def _dst_starting_soon(db: Conn) -> str:
    """A POSIX time zone (standard time at UTC) whose clocks go forward an hour 12 hours from
    now: a day on its wall clock from now is 23 hours. (Clocks going forward at tomorrow's
    midnight made that day 24 hours between 00:00 and 01:00 UTC: the same wall time
    tomorrow fell in the hour they skip, which PostgreSQL reads as standard time.)"""
    row = db.execute("SELECT extract(doy FROM t)::int - 1, to_char(t, 'HH24:MI:SS')"
                     " FROM (SELECT (now() + interval '12 hours') AT TIME ZONE 'UTC' AS t) s").fetchone()
    assert row is not None
    day, at = int(row[0]), str(row[1])  # (a zero-based day of the year, leap days counted)
    # back 60 days later, into the next year past December (as south of the equator)
    return f"XST0XDT,{day}/{at},{(day + 60) % 365}/0"


def test_writer_time_zone_does_not_shorten_a_one_day_ttl(db: Conn) -> None:
    """A TTL counts in UTC, as the engine does: a writer whose clocks go forward tomorrow still
    gets a row, a CQL value and a marker that live 24 hours, not 23."""
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    db.execute("CREATE TABLE cq (id int PRIMARY KEY, v int)")
    db.execute("""SELECT ttl.set_options('cq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    db.execute(psycopg.sql.SQL("SET TimeZone = {}").format(psycopg.sql.Literal(_dst_starting_soon(db))))
    db.execute("INSERT INTO pv VALUES (1, 1), (2, 1)")
    db.execute("UPDATE pv SET v = 2 WHERE id = 2")
    db.execute("INSERT INTO cq VALUES (1, 1)")
    db.execute("UPDATE cq SET v = 2 WHERE id = 1")
    db.execute("RESET TimeZone")
    lives = [r[0] for r in db.execute(
        "SELECT extract(epoch FROM ttl_expires_at - ttl_written_at) FROM pv ORDER BY id").fetchall()]
    cell = db.execute("SELECT extract(epoch FROM ttl_expires_at - ttl_written_at), "
                      "(ttl_values -> '2' ->> 1)::numeric - (ttl_values -> '2' ->> 0)::numeric FROM cq").fetchone()
    assert lives == [86400, 86400]
    assert cell is not None and cell == (86400, 86400)


def test_value_triggers_of_columns_named_outside_ascii_are_recognised(db: Conn) -> None:
    """The check whether a CQL-style table's value triggers match its columns (run by every
    ALTER TABLE on it and by upgrades) reads non-ASCII column names right: a table whose
    triggers are current is not made stale, and a rename still is."""
    db.autocommit = True
    db.execute('CREATE TABLE cq (id int PRIMARY KEY, "größe" int, "名前" text)')
    db.execute("""SELECT ttl.set_options('cq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    assert db.execute("SELECT ttl._value_triggers_stale('cq'::regclass)").fetchone() == (False,)
    db.execute("INSERT INTO cq VALUES (1, 1, 'a')")
    db.execute('UPDATE cq SET "größe" = 2')
    cells = db.execute("SELECT ttl_values IS NOT NULL FROM cq").fetchone()
    assert cells == (True,)
    # what a rename leaves before the event trigger runs: the trigger names the old column
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")  # event triggers do not fire
        db.execute('ALTER TABLE cq RENAME COLUMN "größe" TO "grösse"')
        assert db.execute("SELECT ttl._value_triggers_stale('cq'::regclass)").fetchone() == (True,)
