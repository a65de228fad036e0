"""The option registry (ttl.options) is the one definition of the table options:
defaults, apply, reset, describe and the other lists all follow it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pg_ttl import alembic_ops

Conn = psycopg.Connection[Any]

# A value other than the default, per option kind, for tables t(at timestamptz, n bigint).
OTHER = {"interval": "2 days", "cron": "@daily", "bool": "true", "batch": "7", "rate": "5",
         "partition_action": "detach", "schema": "archive"}


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.execute("CREATE SCHEMA archive")
    db.execute("CREATE TABLE t (at timestamptz, n bigint)")
    db.commit()
    db.autocommit = True
    return db


def registry(conn: Conn) -> list[tuple[str, str, str, str | None]]:
    rows = conn.execute("SELECT name, policy_column, kind, default_value FROM ttl.options ORDER BY position")
    return [(str(n), str(c), str(k), None if d is None else str(d)) for n, c, k, d in rows.fetchall()]


def describe(conn: Conn, table: str = "t") -> dict[str, str | None]:
    return {str(o): v for o, v in conn.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()}


def test_every_registry_column_is_a_policy_column_and_every_option_column_is_registered(conn: Conn) -> None:
    columns = {str(r[0]) for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'ttl.policy'::regclass AND attnum > 0"
        " AND NOT attisdropped").fetchall()}
    registered = {c for _, c, _, _ in registry(conn)}
    assert registered <= columns
    # What is not an option is bookkeeping the engine or the table changes keep.
    assert columns - registered == {"relid", "ttl_atttypid", "created_at", "updated_at", "row_expiry_attnum",
                                    "row_write_attnum", "row_values_attnum", "strict_enabled_rls"}


def test_a_direct_insert_takes_the_registry_defaults_including_the_default_schedule_setting(conn: Conn) -> None:
    conn.execute("UPDATE ttl.settings SET value = '17 3 * * *' WHERE name = 'default_job_cron'")
    conn.execute("INSERT INTO ttl.policy (relid, ttl_attnum, expire_after) VALUES ('t'::regclass, 1, '1 day')")
    shown = describe(conn)
    for name, _, _, default in registry(conn):
        if default is not None:
            assert shown[f"ttl_{name}"] == default, name
    assert shown["ttl_job_cron"] == "17 3 * * *"


# Options of per-row TTL tables only (docs/row-and-column-ttl.md).
PER_ROW_ONLY = ("value_ttl_overrides_table_ttl", "value_ttls", "ignore_value_ttl")


def test_enable_set_and_reset_every_option_follow_the_registry(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    shown = describe(conn)
    # ttl_tiers is not a policy column: the tiers have their own table (ttl.tier, docs/tiers.md)
    assert [o for o in shown if o.startswith("ttl_") and o != "ttl_tiers"] == [
        f"ttl_{n}" for n, _, _, _ in registry(conn)]
    assert shown["ttl_tiers"] is None
    for name, _, kind, default in registry(conn):
        if default is None or kind not in OTHER:
            continue
        if name in PER_ROW_ONLY:  # refused on a table whose TTL counts from a column
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="per-row TTL"):
                conn.execute("SELECT ttl.set_option('t', %s, %s)", (f"ttl_{name}", OTHER[kind]))
            continue
        if name == "partition_action":
            conn.execute("SELECT ttl.set_option('t', 'detach_schema', 'archive')")
        conn.execute("SELECT ttl.set_option('t', %s, %s)", (f"ttl_{name}", OTHER[kind]))
        assert describe(conn)[f"ttl_{name}"] == OTHER[kind], name
        conn.execute("SELECT ttl.reset_option('t', %s)", (name,))
        assert describe(conn)[f"ttl_{name}"] == default, name


def test_options_without_a_default_are_cleared_by_null_and_the_others_refuse_it(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    conn.execute("""SELECT ttl.set_options('t', '{"detach_schema": "archive"}')""")
    conn.execute("""SELECT ttl.set_options('t', '{"detach_schema": null}')""")
    assert describe(conn)["ttl_detach_schema"] is None
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='"ttl_delete_batch_size" must not be NULL'):
        conn.execute("""SELECT ttl.set_options('t', '{"delete_batch_size": null}')""")


def test_an_unknown_option_is_refused_with_the_registry_names(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    names = [n for n, _, _, _ in registry(conn)]
    for call in ("SELECT ttl.set_option('t', 'ttl_nope', '1')", "SELECT ttl.reset_option('t', 'nope')"):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
            conn.execute(call)
        assert 'unknown TTL option "ttl_nope"' in str(info.value)
        hint = info.value.diag.message_hint or ""
        assert all(f"ttl_{n}" in hint for n in names)


def test_range_checks_cover_every_batch_and_rate_option(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    for name, _, kind, _ in registry(conn):
        if kind not in ("batch", "rate"):
            continue
        bad = "0" if kind == "batch" else "-1"
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=f'"ttl_{name}" must be at least 1'):
            conn.execute("SELECT ttl.set_option('t', %s, %s)", (name, bad))


def test_alembic_enable_parameters_are_those_of_ttl_enable(conn: Conn) -> None:
    args = conn.execute(
        "SELECT proargnames FROM pg_proc WHERE oid = 'ttl.enable(regclass, interval, name, text, text, text, integer,"
        " integer, integer, integer, boolean, text, name, boolean)'::regprocedure").fetchone()
    assert args is not None
    named = set(args[0][1:])
    assert {alembic_ops._ENABLE_ARGS.get(k, k) for k in alembic_ops._ENABLE_PARAMS} == named
    assert set(alembic_ops._ENABLE_PARAMS) <= {n for n, _, _, _ in registry(conn)}


def test_two_sessions_changing_one_table_take_turns_and_keep_both_changes(conn: Conn, connect: Any) -> None:
    import threading

    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    first = connect(autocommit=False)
    first.execute("SELECT ttl.set_option('t', 'delete_batch_size', '5')")  # not committed yet
    second = connect()
    done = threading.Event()

    def change() -> None:
        second.execute("SELECT ttl.set_option('t', 'select_batch_size', '7')")
        done.set()

    thread = threading.Thread(target=change)
    thread.start()
    assert not done.wait(0.5)  # waits for the first session's change
    first.commit()
    thread.join(10)
    assert conn.execute("SELECT delete_batch_size, select_batch_size FROM ttl.policy").fetchone() == (5, 7)
