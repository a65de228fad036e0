"""Tiers and whole partitions (sql/82_tiers.sql: ttl.partition_tier, pg_ttl/expire/tiers/): a
range partition on the TTL column whose every row reached a storage tier is exported whole
(verified objects, listed in the manifest) and dropped or detached in the transaction that lists
them; a partition the application holds, writes to meanwhile, or that a crash interrupts stays,
and no row is ever lost or archived twice."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from pg_ttl.archive.storage import StorageError
from pg_ttl.expire import expire, partitions
from pg_ttl.expire.tiers import exports
from tests.helpers import engine_killed_at
from tests.test_tiers import _check_objects, _manifest

ALL_IDS = [*range(1, 51), 71]  # the rows past the tier: 1-40 in pev_old, 41-50 in pev_mid, 71 in the default
COLS = "id, created_at, amount, note"


def _pev(db: psycopg.Connection[Any], storage: Path, *, enable: str = "", hashed: bool = False) -> None:
    """pev, range-partitioned on created_at (T: today 00:00 UTC), tiers 30 days -> local, DELETE at 400 days:

    - pev_old [T-100d, T-60d): ids 1-40, ten a day on T-90d .. T-87d: every row past the tier;
    - pev_mid [T-60d, T-10d): ids 41-50 at T-45d (past the tier), 51-60 at T-15d (not);
    - pev_new [T-10d, T+10d): ids 61-70 at T-1d: none past;
    - pev_default: 71 at T-200d (past), 72 at T+30d.
    ``hashed``: pev_old is itself partitioned by hash of id (2 leaves)."""
    t = "date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    db.execute("CREATE TABLE pev (id int, created_at timestamptz NOT NULL, amount numeric(10, 2), note text,"
               " tags jsonb, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
    for name, lo, hi in (("pev_old", 100, 60), ("pev_mid", 60, 10), ("pev_new", 10, -10)):
        row = db.execute(f"SELECT {t} - %s * interval '1 day', {t} - %s * interval '1 day'", (lo, hi)).fetchone()
        assert row is not None
        sub = " PARTITION BY HASH (id)" if hashed and name == "pev_old" else ""
        db.execute(f"CREATE TABLE {name} PARTITION OF pev FOR VALUES FROM ('{row[0].isoformat()}')"
                   f" TO ('{row[1].isoformat()}'){sub}")
    if hashed:
        for r in (0, 1):
            db.execute(f"CREATE TABLE pev_old_{r} PARTITION OF pev_old FOR VALUES WITH (MODULUS 2, REMAINDER {r})")
    db.execute("CREATE TABLE pev_default PARTITION OF pev DEFAULT")
    db.execute(f"""INSERT INTO pev SELECT g, CASE
                       WHEN g <= 40 THEN {t} - (90 - (g - 1) / 10) * interval '1 day' + g * interval '1 hour'
                       WHEN g <= 50 THEN {t} - interval '45 days' WHEN g <= 60 THEN {t} - interval '15 days'
                       WHEN g <= 70 THEN {t} - interval '1 day' WHEN g = 71 THEN {t} - interval '200 days'
                       ELSE {t} + interval '30 days' END,
                   g * 1.25, 'note ' || g, jsonb_build_object('g', g) FROM generate_series(1, 72) g""")
    db.execute("SELECT ttl.enable('pev', expire_after => '400 days', column_name => 'created_at'" + enable + ")")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{storage}",))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "local"}]')""")
    db.commit()


def _units(db: psycopg.Connection[Any], run_id: int | None) -> dict[str, tuple[Any, ...]]:
    """unit name -> (action, strategy, status, rows_deleted) of a run's history."""
    return {str(r[0]): tuple(r[1:]) for r in db.execute(
        "SELECT unit_name, action, strategy, status, rows_deleted FROM ttl.run_unit WHERE run_id = %s",
        (run_id,)).fetchall()}


def _ids(db: psycopg.Connection[Any]) -> list[int]:
    return [int(i) for (i,) in db.execute("SELECT id FROM pev ORDER BY id").fetchall()]


def _exactly_once(db: psycopg.Connection[Any], root: Path, archived: list[int]) -> list[tuple[Any, ...]]:
    """Every object under ``root`` is listed and verified (size, SHA-256, rows), the objects hold
    ``archived`` each once, and the table holds every other of the 72 rows: none lost, none twice."""
    got = _check_objects(db, root)
    ids = [int(r[0]) for r in got]
    assert ids == archived
    assert sorted(ids + _ids(db)) == list(range(1, 73))
    return got


def _objects_of(db: psycopg.Connection[Any], oids: list[int]) -> dict[str, tuple[str, int, int, int, str]]:
    return {k: v for k, v in _manifest(db).items() if any(f"/{oid}-" in k for oid in oids)}


def test_a_partition_past_a_tier_goes_whole_and_the_others_as_before(db: psycopg.Connection[Any], dsn: str,
                                                                    tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(exports, "OBJECT_ROWS", 4)  # several objects a day
    _pev(db, tmp_path)
    old = db.execute("SELECT 'pev_old'::regclass::oid::int8").fetchone()
    assert old is not None
    leaving = db.execute(f"SELECT {COLS} FROM pev_old ORDER BY id").fetchall()
    db.commit()
    [archived, deleted] = expire(dsn, ["pev"])
    assert (archived.status, archived.rows_deleted, archived.rows_archived) == ("ok", 51, 51)
    assert (deleted.status, deleted.rows_deleted, deleted.partitions_dropped) == ("ok", 0, 0)
    # what the run reports (pg-ttl run, the worker's metrics): the drop, as the history has it
    assert archived.partitions_dropped == 1
    assert {(u.unit, u.action, u.strategy) for u in archived.units} >= {("pev_old", "drop", "export")}
    # pev_old was exported whole and dropped; the partly past partition and the default partition
    # moved their rows past the tier batch by batch and stay; the one not past is untouched
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    assert _ids(db) == [*range(51, 71), 72]
    assert _units(db, archived.run_id) == {"pev_old": ("drop", "export", "ok", 40),
                                           "pev_mid": ("archive", "ctid", "ok", 10),
                                           "pev_new": ("archive", "ctid", "ok", 0),
                                           "pev_default": ("archive", "ctid", "ok", 1)}
    assert db.execute("SELECT status, partitions_dropped, rows_deleted FROM ttl.run WHERE run_id = %s",
                      (archived.run_id,)).fetchone() == ("ok", 1, 51)
    # its objects: listed like a batch's (tier, storage, rows, bytes, SHA-256 checked against the
    # files by _check_objects), a Hive layout by day, at most OBJECT_ROWS rows each; the history
    # counts their bytes and objects
    objects = _objects_of(db, [old[0]])
    assert len(objects) >= 10 and all(n <= 4 for _, _, n, _, _ in objects.values())
    assert {(s, t) for s, t, *_ in objects.values()} == {("local", 1)}
    assert sum(n for _, _, n, _, _ in objects.values()) == 40
    assert all(k.startswith("table=public.pev/tier=local/date=") for k in objects)
    assert db.execute("SELECT bytes_archived, objects_archived FROM ttl.run_unit WHERE run_id = %s"
                      " AND unit_name = 'pev_old'", (archived.run_id,)).fetchone() == (
        sum(b for _, _, _, b, _ in objects.values()), len(objects))
    _exactly_once(db, tmp_path, ALL_IDS)
    # DuckDB reads exactly pev_old's rows, as they left, from pev_old's objects
    files = [str(tmp_path / k) for k in objects]
    got = duckdb.connect().execute(f"SELECT {COLS} FROM read_parquet(?, hive_partitioning = true) ORDER BY id",
                                   [files]).fetchall()
    assert got == leaving
    # the manifest's time range of each object is within its day
    for key, first, last in db.execute("SELECT object_key, min_time, max_time FROM ttl.archive").fetchall():
        if f"/{old[0]}-" in key:
            assert first.strftime("%Y-%m-%d") == last.strftime("%Y-%m-%d") == key.split("date=")[1][:10]


def test_detach_instead_of_drop(db: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    db.execute("CREATE SCHEMA archive")
    _pev(db, tmp_path, enable=", partition_action => 'detach', detach_schema => 'archive'")
    leaving = db.execute(f"SELECT {COLS} FROM pev_old ORDER BY id").fetchall()
    db.commit()
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 51
    assert _units(db, archived.run_id)["pev_old"] == ("detach", "export", "ok", 40)
    assert db.execute("SELECT partitions_detached FROM ttl.run WHERE run_id = %s",
                      (archived.run_id,)).fetchone() == (1,)
    # detached into archive (it keeps its rows, as a detached partition does); gone from pev
    assert db.execute("SELECT to_regclass('public.pev_old'), to_regclass('archive.pev_old') IS NOT NULL"
                      ).fetchone() == (None, True)
    assert db.execute("SELECT count(*) FROM pg_inherits WHERE inhrelid = 'archive.pev_old'::regclass"
                      ).fetchone() == (0,)
    assert db.execute(f"SELECT {COLS} FROM archive.pev_old ORDER BY id").fetchall() == leaving
    got = _check_objects(db, tmp_path)
    assert [int(r[0]) for r in got] == ALL_IDS
    assert _ids(db) == [*range(51, 71), 72]


def test_a_failure_between_writing_and_dropping_loses_and_duplicates_nothing(
        db: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: Any) -> None:
    """The objects are written and verified, the transaction that lists them and drops the partition
    fails (and, as after a crash, nothing removes the objects): everything is still in the partition,
    nothing is listed; the next run removes the unlisted objects and exports it again, once."""
    _pev(db, tmp_path)
    listed_in_failed: list[int] = []

    def fail(ctx: Any) -> str:
        row = ctx.conn.execute("SELECT count(*) FROM ttl.archive").fetchone()
        listed_in_failed.append(int(row[0]))  # the manifest rows are in, in the same transaction
        raise StorageError("simulated: the drop fails")

    monkeypatch.setattr(partitions, "remove_in_transaction", fail)
    monkeypatch.setattr(exports, "remove_objects", lambda storage, keys: None)  # a crash removes nothing
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "failed" and listed_in_failed and listed_in_failed[0] > 0
    assert _units(db, archived.run_id)["pev_old"][2] == "failed"
    assert db.execute("SELECT count(*) FROM pev_old").fetchone() == (40,)
    old = db.execute("SELECT 'pev_old'::regclass::oid::int8").fetchone()
    assert old is not None and _objects_of(db, [old[0]]) == {}  # rolled back with the failure
    written = [p for p in tmp_path.rglob("*.parquet") if p.name.startswith(f"{old[0]}-")]
    assert written  # written, verified, never listed
    db.commit()
    monkeypatch.undo()
    [archived, deleted] = expire(dsn, ["pev"])
    assert (archived.status, archived.rows_deleted, deleted.status) == ("ok", 40, "ok")
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    assert not any(p.exists() for p in written)  # the unlisted objects were removed
    _exactly_once(db, tmp_path, ALL_IDS)


@pytest.mark.slow
def test_killed_before_the_drop_loses_and_duplicates_nothing(db: psycopg.Connection[Any], dsn: str,
                                                             tmp_path: Path, connect: Any) -> None:
    _pev(db, tmp_path)
    db.execute("UPDATE ttl.settings SET value = '60s' WHERE name = 'lock_timeout'")
    db.commit()
    blocker = connect(autocommit=False)
    blocker.execute("SELECT 1 FROM pev LIMIT 0")  # a reader of pev: the DROP waits for it
    with engine_killed_at(db, dsn, "pev", "DROP TABLE", blocker.rollback):
        assert list(tmp_path.rglob("*.parquet"))  # written and verified, listed in the open transaction
    # nothing committed: every row still in the table, nothing listed
    assert db.execute("SELECT count(*) FROM pev").fetchone() == (72,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    db.execute("UPDATE ttl.settings SET value = '1s' WHERE name = 'lock_timeout'")
    db.commit()
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 51
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    _exactly_once(db, tmp_path, ALL_IDS)  # the unlisted objects were removed: each row once


def test_a_row_the_application_holds_keeps_the_partition(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                                         connect: Any) -> None:
    _pev(db, tmp_path)
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM pev WHERE id = 5 FOR UPDATE")
    started = time.monotonic()
    [archived, _] = expire(dsn, ["pev"])
    assert time.monotonic() - started < 5  # the application is not waited on
    # not dropped: its other rows moved batch by batch as any leaf's, the held one stays
    assert archived.status == "ok" and archived.rows_deleted == 50
    assert _units(db, archived.run_id)["pev_old"] == ("archive", "ctid", "ok", 39)
    assert db.execute("SELECT id FROM pev_old").fetchall() == [(5,)]
    _exactly_once(db, tmp_path, [i for i in ALL_IDS if i != 5])
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".parquet"]
    db.commit()
    app.rollback()
    # released: the next run exports what is left of it whole and drops it
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and _units(db, archived.run_id)["pev_old"] == ("drop", "export", "ok", 1)
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    _exactly_once(db, tmp_path, ALL_IDS)


def test_a_partition_written_to_while_it_is_exported_stays(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                                           connect: Any, monkeypatch: Any) -> None:
    """A row updated after it was read (same row count): the check under the lock sees it, the
    objects go, and the rows move batch by batch: the archive holds the row as it is now."""
    _pev(db, tmp_path)
    app = connect()
    read_leaf = exports._read_leaf

    def then_update(*args: Any) -> None:
        read_leaf(*args)
        app.execute("UPDATE pev SET note = 'changed' WHERE id = 3")

    monkeypatch.setattr(exports, "_read_leaf", then_update)
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 51
    assert _units(db, archived.run_id)["pev_old"] == ("archive", "ctid", "ok", 40)
    assert db.execute("SELECT count(*) FROM pev_old").fetchone() == (0,)  # stays, empty
    got = _exactly_once(db, tmp_path, ALL_IDS)
    assert [r[3] for r in got if r[0] == 3] == ["changed"]


def test_a_sub_partitioned_partition_goes_whole(db: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    _pev(db, tmp_path, hashed=True)
    leaves = [int(r[0]) for r in db.execute("SELECT oid FROM pg_class WHERE relname IN ('pev_old_0', 'pev_old_1')")]
    db.commit()
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 51
    assert _units(db, archived.run_id)["pev_old"] == ("drop", "export", "ok", 40)
    assert "pev_old_0" not in _units(db, archived.run_id)  # one unit, not its leaves
    assert db.execute("SELECT to_regclass('pev_old'), to_regclass('pev_old_0')").fetchone() == (None, None)
    assert sum(n for _, _, n, _, _ in _objects_of(db, leaves).values()) == 40  # objects named by their leaf
    _exactly_once(db, tmp_path, ALL_IDS)


def test_which_tier_a_partition_goes_to(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    """The last storage tier its upper bound reached; none past the DELETE (the deletion run drops
    it) unless the tiers archive before the DELETE."""
    _pev(db, tmp_path)
    db.execute("SELECT ttl.create_storage('deep', %s)", (f"file://{tmp_path / 'deep'}",))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "local"},
                  {"after": "300 days", "to": "deep"}]')""")

    def tier(days_ago: int) -> int | None:
        row = db.execute("SELECT ttl.partition_tier('pev'::regclass, now(), (now() - %s * interval '1 day')::text)",
                         (days_ago,)).fetchone()
        assert row is not None
        return None if row[0] is None else int(row[0])

    assert [tier(d) for d in (10, 31, 299, 301, 401)] == [None, 1, 1, 2, None]
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "local"}, {"after": "300 days",
                  "to": "deep"}, {"after": "400 days", "action": "delete", "archive_before_delete": true}]')""")
    assert [tier(d) for d in (31, 401)] == [1, 2]
    # months: a month-end clamp on a time of day makes a bound reach "1 month" a day later
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "1 month", "to": "local"}]')""")
    row = db.execute("SELECT ttl.partition_tier('pev'::regclass, '2020-05-01 00:00+00', '2020-04-01 00:00+00'),"
                     " ttl.partition_tier('pev'::regclass, '2020-05-01 00:00+00', '2020-03-31 00:00+00')").fetchone()
    assert row == (None, 1)


def test_rows_past_the_delete_in_a_partition_exported_whole(db: psycopg.Connection[Any], dsn: str,
                                                            tmp_path: Path) -> None:
    """A partition past the tier, not past the DELETE, with some rows past the DELETE: those go with
    the partition unarchived (as the deletion run would delete them), unless archive_before_delete."""
    for before_delete in (False, True):
        db.execute("DROP TABLE IF EXISTS old_ev")
        db.execute("SELECT ttl.drop_storage(name) FROM ttl.storage")
        db.execute("CREATE TABLE old_ev (id int, at timestamptz NOT NULL, PRIMARY KEY (id, at))"
                   " PARTITION BY RANGE (at)")
        db.execute("CREATE TABLE old_ev_1 PARTITION OF old_ev FOR VALUES FROM (now() - interval '500 days')"
                   " TO (now() - interval '350 days')")
        db.execute("INSERT INTO old_ev SELECT g, now() - CASE WHEN g <= 5 THEN interval '450 days'"
                   " ELSE interval '380 days' END FROM generate_series(1, 10) g")
        db.execute("SELECT ttl.enable('old_ev', expire_after => '400 days', column_name => 'at')")
        root = tmp_path / str(before_delete)
        db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{root}",))
        db.execute("SELECT ttl.set_tiers('old_ev', %s)", (
            '[{"after": "30 days", "to": "local"}, {"after": "400 days", "action": "delete"'
            + (', "archive_before_delete": true' if before_delete else "") + "}]",))
        db.commit()
        [archived, deleted] = expire(dsn, ["old_ev"])
        assert (archived.status, deleted.status) == ("ok", "ok")
        assert _units(db, archived.run_id)["old_ev_1"][:3] == ("drop", "export", "ok")
        assert db.execute("SELECT to_regclass('old_ev_1')").fetchone() == (None,)
        files = sorted(str(p) for p in root.rglob("*.parquet"))
        ids = [int(i) for (i,) in duckdb.connect().execute("SELECT id FROM read_parquet(?) ORDER BY id",
                                                          [files]).fetchall()]
        assert ids == (list(range(1, 11)) if before_delete else list(range(6, 11)))
        db.execute("SELECT ttl.disable('old_ev')")
        db.execute("DELETE FROM ttl.archive")
        db.commit()


def test_plan_shows_a_partition_exported_whole(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                               cli: Any) -> None:
    from pg_ttl.expire import plan

    _pev(db, tmp_path)
    plans = {(p.unit, p.action): p for p in plan(db, "pev")}
    export = plans[("pev_old", "export")]
    assert (export.rows, export.total_rows, export.target, export.then) == (40, 40, "local", "drop")
    assert export.bytes_reclaimed > 0 and export.oldest_expiry is not None
    # the other partitions move their rows past the tier batch by batch, as the run does
    assert plans[("pev_mid", "archive")].rows == 10 and ("pev_old", "archive") not in plans
    out = cli("plan", "pev", "--dsn", dsn).stdout
    assert "export whole to local, then drop" in out and "move to local" in out
    db.execute("CREATE SCHEMA archive")
    db.execute("SELECT ttl.set_option('pev', 'detach_schema', 'archive')")
    db.execute("SELECT ttl.set_option('pev', 'partition_action', 'detach')")
    db.commit()
    assert {p.unit: p.then for p in plan(db, "pev") if p.action == "export"} == {"pev_old": "detach"}
    # a dry run: nothing moved
    assert len(_ids(db)) == 72 and not list(tmp_path.rglob("*.parquet"))
