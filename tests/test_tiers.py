"""Tiers (sql/82_tiers.sql, pg_ttl/expire/tiers/, pg_ttl/archive): rows that
reach a storage tier are written to a directory as Parquet, verified, recorded
and deleted in one transaction; DuckDB reads them back as they left; restore is
idempotent; a crash between writing and deleting loses and duplicates nothing."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import uuid4

import duckdb
import psycopg
import pytest

from pg_ttl.archive.restore import restore
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer
from tests.conftest import dsn_of
from tests.helpers import engine_killed_at, wait_for_engine_lock_wait

COLS = "id, created_at, amount, note, tags::text"


def _events(db: psycopg.Connection[Any], storage: Path) -> None:
    """ids 1-20: 10 days old (live); 21-50: 40 days (past the 30-day tier); 51-60: 500 days
    (past the 400-day DELETE)."""
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL,"
               " amount numeric(10, 2), note text, tags jsonb)")
    db.execute("INSERT INTO events SELECT g, now() - CASE WHEN g <= 20 THEN interval '10 days'"
               " WHEN g <= 50 THEN interval '40 days' + g * interval '1 hour' ELSE interval '500 days' END,"
               " g * 1.25, 'note ' || g, jsonb_build_object('g', g) FROM generate_series(1, 60) g")
    db.execute("SELECT ttl.enable('events', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{storage}",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "local"}]')""")
    db.commit()


def _parquet_rows(storage: Path) -> list[tuple[Any, ...]]:
    files = sorted(str(p) for p in storage.rglob("*.parquet"))
    if not files:
        return []
    con = duckdb.connect()
    return con.execute("SELECT id, created_at, amount, note, tags FROM read_parquet(?, hive_partitioning = true)"
                       " ORDER BY id", [files]).fetchall()


def test_rows_move_verified_and_a_third_party_reads_them_as_they_left(db: psycopg.Connection[Any], dsn: str,
                                                                       tmp_path: Path) -> None:
    _events(db, tmp_path)
    leaving = db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall()
    db.commit()
    results = expire(dsn, ["events"])
    assert [(r.status, r.rows_deleted) for r in results] == [("ok", 30), ("ok", 10)]  # archived, then deleted
    assert [r[0] for r in db.execute("SELECT id FROM events ORDER BY id").fetchall()] == list(range(1, 21))
    got = _parquet_rows(tmp_path)
    assert [(i, t, a, n, str(j).replace("'", '"').replace(" ", "")) for i, t, a, n, j in got] == \
        [(i, t, a, n, j.replace(" ", "")) for i, t, a, n, j in leaving]
    assert all(isinstance(a, Decimal) for _, _, a, _, _ in got)  # numeric(10,2) as a decimal
    # the manifest lists every object, with its rows and checksum, in a Hive layout by day
    manifest = db.execute("SELECT object_key, rows, bytes FROM ttl.archive ORDER BY object_key").fetchall()
    files = {str(p.relative_to(tmp_path)): p.stat().st_size for p in tmp_path.rglob("*.parquet")}
    assert {k: b for k, _, b in manifest} == files and sum(n for _, n, _ in manifest) == 30
    assert all(k.startswith("table=public.events/tier=local/date=") for k in files)
    # rows past the DELETE tier were deleted, not archived
    assert not any(i > 50 for i, *_ in got)


def test_restore_brings_rows_back_once(db: psycopg.Connection[Any], dsn: str, tmp_path: Path, cli: Any) -> None:
    _events(db, tmp_path)
    before = db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall()
    db.commit()
    expire(dsn, ["events"])
    result = cli("restore", "events", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "restored 30 rows" in result.stdout
    assert db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall() == before
    again = cli("restore", "events", "--dsn", dsn)
    assert "restored 0 rows" in again.stdout and "30 read" in again.stdout
    assert db.execute("SELECT count(*) FROM events").fetchone() == (50,)


def _tiers(text: str) -> str:
    return f"SELECT ttl.set_tiers('events', '{text}')"


@pytest.mark.parametrize("call, error", [
    (_tiers('[{"after": "30 days", "to": "nowhere"}]'), 'storage "nowhere" does not exist'),
    (_tiers('[{"after": "30 days", "action": "delete"}, {"after": "40 days", "to": "local"}]'),
     "DELETE must be the last tier"),
    (_tiers('[{"after": "30 days", "to": "local"}, {"after": "20 days", "to": "local"}]'), '"after" must increase'),
    (_tiers('[{"after": "500 days", "to": "local"}]'), "not before the final DELETE"),
    (_tiers('[{"after": "soon", "to": "local"}]'), "must be an interval"),
    (_tiers('{"after": "30 days"}'), "a JSON array is expected"),
    ("SELECT ttl.create_storage('cold', 'postgresql://me:pw@h/db')", "credentials are never stored"),
    ("SELECT ttl.create_storage('cold', 's3://bucket/x?secret_key=abc')", "credentials are never stored"),
    ("SELECT ttl.create_storage('cold', 's3://key:secret@bucket/x')", "credentials are never stored"),
    ("SELECT ttl.create_storage('cold', 's3://B_ad/x')", "invalid URL"),
    ("SELECT ttl.create_storage('cold', 's3://bucket/x?regoin=eu-west-1')", 'unknown setting regoin'),
    ("SELECT ttl.create_storage('bad', 'ftp://host/x')", "invalid URL"),
    ("SELECT ttl.create_storage('local', 'file:///tmp')", "already exists"),
    ("SELECT ttl.set_option('events', 'expire_after', '20 days')", "not before the final DELETE"),
    ("SELECT ttl.drop_storage('local')", "is used by the tiers of"),
])
def test_bad_tiers_and_storages_are_refused_and_change_nothing(db: psycopg.Connection[Any], tmp_path: Path,
                                                              call: str, error: str) -> None:
    _events(db, tmp_path)
    before = db.execute("SELECT (SELECT json_agg(t ORDER BY position) FROM ttl.tier t),"
                        " (SELECT count(*) FROM ttl.storage), (SELECT expire_after FROM ttl.policy)").fetchone()
    with pytest.raises(psycopg.Error, match=error):
        db.execute(call)
    db.rollback()
    after = db.execute("SELECT (SELECT json_agg(t ORDER BY position) FROM ttl.tier t),"
                       " (SELECT count(*) FROM ttl.storage), (SELECT expire_after FROM ttl.policy)").fetchone()
    assert after == before


def test_tiers_need_a_ttl_column_and_go_with_the_policy(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    db.execute("CREATE TABLE s (id int PRIMARY KEY, expire_at timestamptz)")
    db.execute("SELECT ttl.enable('s', expiration_expression => 'expire_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="tiers count from a TTL column"):
        db.execute("""SELECT ttl.set_tiers('s', '[{"after": "1 day", "to": "local"}]')""")
    db.rollback()
    _events(db, tmp_path / "x")
    assert db.execute("SELECT count(*) FROM ttl.tier").fetchone() == (1,)
    db.execute("SELECT ttl.disable('events')")
    assert db.execute("SELECT count(*) FROM ttl.tier").fetchone() == (0,)


def test_an_unwritable_storage_fails_the_unit_and_deletes_nothing(db: psycopg.Connection[Any], dsn: str,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "archive"
    _events(db, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("a file where the directory should be")
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "failed" and "cannot write" in (archived.units[0].error or "")
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (30,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    target.unlink()
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30


def test_a_full_disk_fails_the_unit_and_deletes_nothing(db: psycopg.Connection[Any], dsn: str,
                                                        tmp_path: Path) -> None:
    """The storage's directory on a full filesystem: a 4 kB tmpfs, filled, mounted over it for
    the engine's process only (a mount namespace of its own)."""
    target = tmp_path / "archive"
    target.mkdir()
    _events(db, target)
    namespace = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
    script = ('mount -t tmpfs -o size=4k pg-ttl-full "$1" && dd if=/dev/zero of="$1/filler" bs=4k count=1'
              ' 2>/dev/null; df "$1" | tail -1; shift; exec "$@"')
    done = subprocess.run([*namespace, "sh", "-c", script, "sh", str(target), sys.executable, "-m", "pg_ttl", "run",
                           "events", "--quiet", "--dsn", dsn], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "400"})
    assert "100%" in done.stdout, done.stdout + done.stderr  # the engine ran on the full filesystem
    row = db.execute("SELECT u.status, u.error FROM ttl.run_unit u JOIN ttl.run r USING (run_id)"
                     " WHERE u.action = 'archive' ORDER BY r.run_id DESC LIMIT 1").fetchone()
    assert row is not None and row[0] == "failed"
    assert 'storage "local"' in row[1] and "No space left on device" in row[1], row
    assert done.returncode != 0 and "No space left on device" in done.stdout + done.stderr
    # nothing of the tier deleted, nothing listed; the next run, with room, moves them once
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (30,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    assert not list(target.rglob("*"))  # the mount was the engine's alone
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30
    assert sorted(i for i, *_ in _parquet_rows(target)) == list(range(21, 51))


def test_archive_batch_size_sets_the_steps_and_so_the_objects(db: psycopg.Connection[Any], dsn: str,
                                                                tmp_path: Path) -> None:
    """20,000 rows of two days past the tier: by default one step, an object per day; with
    ttl_archive_batch_size 2,000, about ten steps, an object per day of each."""
    db.execute("CREATE TABLE logs (id int PRIMARY KEY, created_at timestamptz NOT NULL, line text)")
    db.execute("INSERT INTO logs SELECT g, date_trunc('day', now()) - interval '40 days' + g * interval '8 seconds',"
               " 'line ' || g FROM generate_series(1, 20000) g")
    db.execute("ANALYZE logs")
    db.execute("SELECT ttl.enable('logs', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    db.execute("""SELECT ttl.set_tiers('logs', '[{"after": "30 days", "to": "local"}]')""")
    assert db.execute("SELECT value FROM ttl.describe('logs') WHERE option = 'ttl_archive_batch_size'").fetchone() \
        == ("50000",)
    db.commit()
    [archived, _] = expire(dsn, ["logs"])
    assert (archived.status, archived.rows_deleted) == ("ok", 20000)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (2,)  # the two days, one step
    db.execute("SELECT ttl.pause('logs')")
    db.commit()
    assert restore(db, "logs").rows_inserted == 20000
    db.execute("TRUNCATE ttl.archive")
    db.execute("SELECT ttl.resume('logs')")
    db.execute("SELECT ttl.set_option('logs', 'archive_batch_size', '2000')")
    db.commit()
    for p in tmp_path.rglob("*.parquet"):
        p.unlink()
    [archived, _] = expire(dsn, ["logs"])
    assert (archived.status, archived.rows_deleted) == ("ok", 20000)
    objects = db.execute("SELECT count(*), sum(rows), max(rows) FROM ttl.archive").fetchone()
    assert objects is not None and objects[0] >= 9 and objects[1] == 20000 and objects[2] <= 3000
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="archive_batch_size"):
        db.execute("SELECT ttl.set_option('logs', 'archive_batch_size', '0')")
    db.rollback()


def test_a_row_the_application_holds_waits_for_the_next_run(db: psycopg.Connection[Any], dsn: str,
                                                           tmp_path: Path, connect: Any) -> None:
    _events(db, tmp_path)
    app = connect(autocommit=False)
    app.execute("SELECT * FROM events WHERE id = 30 FOR UPDATE")
    started = time.monotonic()
    [archived, _] = expire(dsn, ["events"])
    assert time.monotonic() - started < 5 and archived.rows_deleted == 29
    assert db.execute("SELECT id FROM events WHERE id BETWEEN 21 AND 50").fetchall() == [(30,)]
    app.execute("UPDATE events SET created_at = now() WHERE id = 30")  # the holder makes it live
    app.commit()
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.rows_deleted == 0 and db.execute("SELECT 1 FROM events WHERE id = 30").fetchone() == (1,)
    assert not any(i == 30 for i, *_ in _parquet_rows(tmp_path))


def test_a_row_updated_while_its_batch_is_written_stays_and_is_not_archived(db: psycopg.Connection[Any], dsn: str,
                                                                             tmp_path: Path, connect: Any) -> None:
    _events(db, tmp_path)
    db.execute("UPDATE ttl.settings SET value = '60s' WHERE name IN ('lock_timeout', 'row_lock_timeout')")
    db.commit()
    app = connect(autocommit=False)
    app.execute("LOCK TABLE events IN SHARE MODE")  # the batch reads and writes its rows, then waits to delete
    results: list[Any] = []
    engine = threading.Thread(target=lambda: results.append(expire(dsn, ["events"])))
    engine.start()
    try:
        wait_for_engine_lock_wait(db, "DELETE")
        assert list(tmp_path.rglob("*.parquet"))  # row 30 was read and written, not yet listed
        app.execute("UPDATE events SET created_at = now() WHERE id = 30")  # to a later expiry
    finally:
        app.commit()
        engine.join(60)
    [[archived, _]] = results
    assert archived.status == "ok" and archived.rows_deleted == 29
    # row 30 stays, as updated; the objects of the undone batch were removed; the others once
    assert db.execute("SELECT created_at > now() - interval '1 hour' FROM events WHERE id = 30").fetchone() == (True,)
    listed = {k for (k,) in db.execute("SELECT object_key FROM ttl.archive").fetchall()}
    assert {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet")} == listed
    assert sorted(i for i, *_ in _parquet_rows(tmp_path)) == [i for i in range(21, 51) if i != 30]
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (1,)


@pytest.mark.parametrize("with_bytea", [True, False], ids=["with-bytea", "copied-back"])
def test_every_column_type_is_archived_as_it_was(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                                 with_bytea: bool) -> None:
    """Rows leave as CSV parsed by Arrow: every mapped type, NULLs, empty strings, quotes,
    commas and newlines, special floats and bytea arrive as they were, and come back so
    (restore: COPY of the objects as CSV, or, with a bytea column, row by row)."""
    db.execute("""CREATE TABLE kinds (id int PRIMARY KEY, created_at timestamptz NOT NULL, b boolean, i2 smallint,
                  i8 bigint, f4 real, f8 double precision, d date, ts timestamp, n numeric(12, 3), bin bytea,
                  t text, vc varchar(20), ch char(3), u uuid, j jsonb, arr int[], iv interval)""")
    db.execute("""INSERT INTO kinds VALUES
        (1, now() - interval '40 days', true, -32768, 9223372036854775807, 1.5, 'NaN', '0001-01-01',
         '1999-12-31 23:59:59.999999', -123456789.125, decode('00ff0a2c22', 'hex'), 'a "quoted", comma
and newline', '', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, "x"]}', '{1,NULL,3}', '1 day 2 hours'),
        (2, now() - interval '41 days', false, 0, 0, 'Infinity', '-Infinity', '2026-02-28', '2026-02-28 00:00:00',
         0, '', '', NULL, NULL, NULL, 'null', '{}', '-1 mons'),
        (3, now() - interval '42 days', NULL, NULL, NULL, NULL, -0.0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL, NULL)""")
    if not with_bytea:
        db.execute("ALTER TABLE kinds DROP COLUMN bin")
    cols = "id, created_at, b, i2, i8, f4, f8, d, ts, n, " + ("bin, " if with_bytea else "") + \
        "t, vc, ch, u::text, j::text, arr::text, iv::text"
    leaving = db.execute(f"SELECT {cols} FROM kinds ORDER BY id").fetchall()
    db.execute("SELECT ttl.enable('kinds', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    db.execute("""SELECT ttl.set_tiers('kinds', '[{"after": "30 days", "to": "local"}]')""")
    db.commit()
    [archived, _] = expire(dsn, ["kinds"])
    assert (archived.status, archived.rows_deleted) == ("ok", 3)
    import pyarrow.parquet as pq
    got = sorted((tuple(r.values()) for p in tmp_path.rglob("*.parquet") for r in pq.read_table(p).to_pylist()),
                 key=lambda r: r[0])

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
            return math.isnan(b)
        return bool(a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b)))

    assert len(got) == 3
    for want, have in zip(leaving, got, strict=True):
        assert all(same(w, h) for w, h in zip(want, have, strict=True)), (want, have)
    # restore brings them back as they were
    db.execute("SELECT ttl.pause('kinds')")
    db.commit()
    restore_result = restore(db, "kinds")
    db.commit()
    assert restore_result.rows_inserted == 3
    back = db.execute(f"SELECT {cols} FROM kinds ORDER BY id").fetchall()
    for want, have in zip(leaving, back, strict=True):
        assert all(same(w, h) for w, h in zip(want, have, strict=True)), (want, have)


def test_a_value_parquet_cannot_hold_fails_the_unit_and_deletes_nothing(db: psycopg.Connection[Any], dsn: str,
                                                                        tmp_path: Path) -> None:
    _events(db, tmp_path)
    db.execute("ALTER TABLE events ADD COLUMN seen timestamptz")
    db.execute("UPDATE events SET seen = 'infinity' WHERE id = 33")
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "failed" and "no Parquet form" in (archived.error or "")
    assert db.execute("SELECT count(*) FROM events").fetchone() == (50,)  # only the 10 past the DELETE went
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    assert not list(tmp_path.rglob("*.parquet"))


@pytest.mark.slow
def test_killed_between_writing_and_deleting_loses_and_duplicates_nothing(db: psycopg.Connection[Any], dsn: str,
                                                                          tmp_path: Path, connect: Any) -> None:
    _events(db, tmp_path)
    db.execute("UPDATE ttl.settings SET value = '60s' WHERE name IN ('lock_timeout', 'row_lock_timeout')")
    db.commit()
    blocker = connect(autocommit=False)
    blocker.execute("LOCK TABLE ttl.archive IN SHARE MODE")  # lets the batch delete and write, not list
    with engine_killed_at(db, dsn, "events", "%INSERT INTO ttl.archive", blocker.rollback):
        # the object was written and verified before its manifest row and the commit
        assert list(tmp_path.rglob("*.parquet"))
    # nothing committed: every row still here, no object listed, the written one unlisted
    assert db.execute("SELECT count(*) FROM events").fetchone() == (60,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    db.execute("UPDATE ttl.settings SET value = CASE name WHEN 'lock_timeout' THEN '1s' ELSE '50ms' END"
               " WHERE name IN ('lock_timeout', 'row_lock_timeout')")
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30
    # exactly once: the unlisted object was removed, each row is in the table or in one object
    listed = {k for (k,) in db.execute("SELECT object_key FROM ttl.archive").fetchall()}
    assert {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet")} == listed
    ids = [i for i, *_ in _parquet_rows(tmp_path)]
    assert sorted(ids) == list(range(21, 51))


# -- S3: the moto server, a real S3-compatible HTTP endpoint ------------------------

@pytest.fixture(scope="module")
def s3() -> Any:
    from moto.server import ThreadedMotoServer
    from pyarrow import fs

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="pg-ttl-test", AWS_SECRET_ACCESS_KEY="pg-ttl-test")
    client = fs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                             allow_bucket_creation=True)
    client.create_dir("archive-bucket")
    try:
        yield f"http://{host}:{port}", client
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def test_rows_move_to_s3_verified_and_come_back(db: psycopg.Connection[Any], dsn: str, s3: Any, tmp_path: Path,
                                                cli: Any) -> None:
    import pyarrow.parquet as pq
    from pyarrow import fs

    endpoint, client = s3
    prefix = f"pg-{uuid4().hex}"
    _events(db, tmp_path)
    db.execute("SELECT ttl.create_storage('cold', %s)", (f"s3://archive-bucket/{prefix}?endpoint={endpoint}&region=us-east-1",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "cold"}]')""")
    leaving = db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall()
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30, archived.units
    infos = client.get_file_info(fs.FileSelector(f"archive-bucket/{prefix}", recursive=True))
    keys = {i.path[len(f"archive-bucket/{prefix}/"):]: i.size for i in infos if i.type == fs.FileType.File}
    manifest = {k: b for k, b in db.execute("SELECT object_key, bytes FROM ttl.archive WHERE storage = 'cold'")}
    assert keys == manifest and not list(tmp_path.rglob("*.parquet"))
    got = []
    for key in sorted(keys):
        got.extend(pq.read_table(f"archive-bucket/{prefix}/{key}", filesystem=client).to_pylist())
    got.sort(key=lambda r: r["id"])
    assert [(r["id"], r["created_at"], r["amount"], r["note"]) for r in got] == [r[:4] for r in leaving]
    db.commit()
    result = cli("restore", "events", "--tier", "cold", "--dsn", dsn,
                 env={**os.environ, "AWS_ACCESS_KEY_ID": "pg-ttl-test", "AWS_SECRET_ACCESS_KEY": "pg-ttl-test"})
    assert result.returncode == 0 and "restored 30 rows" in result.stdout, result.stderr
    assert db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall() == leaving


def _partitioned(db: psycopg.Connection[Any], key: str = "id, created_at") -> None:
    """pev, range-partitioned on created_at: pev_old [now-100d, now-60d) holds ids 1-10 (every
    row past a 30-day tier: exported whole), pev_new [now-60d, now+10d) ids 11-20 (about 1 day old)."""
    db.execute(f"CREATE TABLE pev (id int, created_at timestamptz NOT NULL, note text, PRIMARY KEY ({key}))"
               " PARTITION BY RANGE (created_at)")
    db.execute("CREATE TABLE pev_old PARTITION OF pev FOR VALUES FROM (now() - interval '100 days')"
               " TO (now() - interval '60 days')")
    db.execute("CREATE TABLE pev_new PARTITION OF pev FOR VALUES FROM (now() - interval '60 days')"
               " TO (now() + interval '10 days')")
    db.execute("INSERT INTO pev SELECT g, now() - CASE WHEN g <= 10 THEN interval '80 days' ELSE interval '1 day' END"
               " + g * interval '1 hour', 'note ' || g FROM generate_series(1, 20) g")
    db.execute("SELECT ttl.enable('pev', expire_after => '400 days', column_name => 'created_at')")


def test_s3_objects_are_verified_by_the_checksum_s3_computed(s3: Any, monkeypatch: Any) -> None:
    """S3's ETag of a PutObject is the MD5 of the bytes it received: equal to ours, the object is
    verified without reading it back; different (or no MD5: encrypted buckets), it is read back."""
    from pg_ttl.archive.storage import ObjectStore, StorageError

    endpoint, _client = s3
    store = ObjectStore("cold", f"s3://archive-bucket/{uuid4().hex}?endpoint={endpoint}&region=us-east-1")
    store.put("a.parquet", b"written bytes")
    with monkeypatch.context() as m:
        m.setattr(ObjectStore, "get", lambda self, key: pytest.fail("read back although S3's checksum matched"))
        store.verify("a.parquet", b"written bytes")
    with pytest.raises(StorageError, match="read back differs"):
        store.verify("a.parquet", b"other  bytes!")  # same size, another checksum: read back, and wrong


def test_s3_credentials_from_a_file_the_storage_names(db: psycopg.Connection[Any], dsn: str, s3: Any,
                                                      tmp_path: Path, monkeypatch: Any) -> None:
    """``credentials_file`` and ``profile``: the keys of that profile, not the environment's; a
    missing file or profile is an error naming them (never their contents)."""
    from pg_ttl.archive.storage import ObjectStore, StorageError

    endpoint, _client = s3
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = defaultsecret\n"
                     "[archive]\naws_access_key_id = ARCHIVEKEY\naws_secret_access_key = archivesecret\n"
                     "aws_session_token = archivetoken\n")
    base = f"s3://archive-bucket/{uuid4().hex}?endpoint={endpoint}&region=us-east-1"

    def keys(url: str) -> tuple[str, str, str]:
        options = ObjectStore("cold", url).fs.__reduce__()[1][0]  # what the S3 client was given
        return options["access_key"], options["secret_key"], options["session_token"]

    assert keys(f"{base}&credentials_file={creds}&profile=archive") == ("ARCHIVEKEY", "archivesecret", "archivetoken")
    assert keys(f"{base}&credentials_file={creds}") == ("DEFAULTKEY", "defaultsecret", "")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))  # profile alone: the shared file's
    assert keys(f"{base}&profile=archive")[0] == "ARCHIVEKEY"
    with pytest.raises(StorageError, match='has no profile "nope"') as refused:
        ObjectStore("cold", f"{base}&credentials_file={creds}&profile=nope")
    assert "archivesecret" not in str(refused.value) and "defaultsecret" not in str(refused.value)
    with pytest.raises(StorageError, match="cannot read the credentials file"):
        ObjectStore("cold", f"{base}&credentials_file={tmp_path}/missing")
    # the engine moves rows with them, none in its environment (moto takes any key)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    _events(db, tmp_path / "unused")
    db.execute("SELECT ttl.create_storage('cold', %s)", (f"{base}&credentials_file={creds}&profile=archive",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "cold"}]')""")
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30


def test_a_partition_past_a_tier_goes_whole_to_s3(db: psycopg.Connection[Any], dsn: str, s3: Any) -> None:
    import pyarrow.parquet as pq
    from pyarrow import fs

    endpoint, client = s3
    prefix = f"pg-{uuid4().hex}"
    _partitioned(db)
    db.execute("SELECT ttl.create_storage('cold', %s)",
               (f"s3://archive-bucket/{prefix}?endpoint={endpoint}&region=us-east-1",))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "cold"}]')""")
    leaving = db.execute("SELECT id, created_at, note FROM pev_old ORDER BY id").fetchall()
    db.commit()
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 10, archived.units
    assert db.execute("SELECT action, strategy, rows_deleted FROM ttl.run_unit WHERE run_id = %s"
                      " AND unit_name = 'pev_old'", (archived.run_id,)).fetchone() == ("drop", "export", 10)
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    # the bucket holds exactly the listed objects (sizes as listed); they hold pev_old's rows once
    infos = client.get_file_info(fs.FileSelector(f"archive-bucket/{prefix}", recursive=True))
    keys = {i.path[len(f"archive-bucket/{prefix}/"):]: i.size for i in infos if i.type == fs.FileType.File}
    assert keys == {k: b for k, b in db.execute("SELECT object_key, bytes FROM ttl.archive")}
    got = []
    for key in sorted(keys):
        got.extend(pq.read_table(f"archive-bucket/{prefix}/{key}", filesystem=client).to_pylist())
    assert sorted((r["id"], r["created_at"], r["note"]) for r in got) == leaving
    assert [r[0] for r in db.execute("SELECT id FROM pev ORDER BY id").fetchall()] == list(range(11, 21))


def test_an_unreachable_object_store_fails_the_unit_and_deletes_nothing(db: psycopg.Connection[Any], dsn: str,
                                                                        tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _events(db, tmp_path)
    db.execute("SELECT ttl.create_storage('gone', %s)", (f"s3://archive-bucket/x?endpoint=http://127.0.0.1:{port}",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "gone"}]')""")
    db.commit()
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "failed" and "cannot" in (archived.units[0].error or "")
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (30,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)


def test_wrong_credentials_fail_the_unit_and_delete_nothing(db: psycopg.Connection[Any], dsn: str, s3: Any,
                                                             tmp_path: Path) -> None:
    """The S3 server checks signatures (moto's authentication on): our access key is unknown there."""
    import urllib.request

    endpoint, _client = s3
    _events(db, tmp_path)
    db.execute("SELECT ttl.create_storage('cold', %s)",
               (f"s3://archive-bucket/{uuid4().hex}?endpoint={endpoint}&region=us-east-1",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "cold"}]')""")
    db.commit()

    def auth(count: str) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=count.encode(),
                                                      headers={"Content-Type": "text/plain"}, method="POST"),
                               timeout=10).read()

    auth("0")  # every request is authenticated from now on
    try:
        [archived, _] = expire(dsn, ["events"])
    finally:
        auth("inf")
    assert archived.status == "failed" and 'storage "cold"' in (archived.units[0].error or "")
    assert "Access" in (archived.units[0].error or "")  # what S3 said (InvalidAccessKeyId, AccessDenied)
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (30,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    db.commit()
    [archived, _] = expire(dsn, ["events"])  # the credentials fixed: the next run moves them
    assert archived.status == "ok" and archived.rows_deleted == 30


def test_rows_move_in_one_session_when_a_second_cannot_be_had(db: psycopg.Connection[Any], dsn: str,
                                                               tmp_path: Path) -> None:
    """The engine reads ranges in a second session; a login limited to one connection reads
    them in its own session, between its statements."""
    db.execute("CREATE ROLE archiver LOGIN CONNECTION LIMIT 1")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO archiver")
    db.commit()
    owner = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="archiver"), autocommit=True)
    try:
        owner.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
        owner.execute("INSERT INTO events SELECT g, now() - interval '40 days' + g * interval '1 minute', 'n' || g"
                      " FROM generate_series(1, 5000) g")
        owner.execute("SELECT ttl.enable('events', expire_after => '400 days', column_name => 'created_at')")
        owner.execute("SELECT ttl.set_option('events', 'select_batch_size', '500')")  # several ranges
    finally:
        owner.close()
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "local"}]')""")
    db.commit()
    [archived, _] = expire(psycopg.conninfo.make_conninfo(dsn, user="archiver"), ["events"])
    assert (archived.status, archived.rows_deleted) == ("ok", 5000)
    assert sorted(i for (i,) in duckdb.connect().execute(
        "SELECT id FROM read_parquet(?)", [[str(p) for p in tmp_path.rglob("*.parquet")]]).fetchall()) == \
        list(range(1, 5001))
    db.execute("DROP TABLE events")
    db.execute("DROP OWNED BY archiver")
    db.execute("DROP ROLE archiver")
    db.commit()


def test_the_worker_counts_archived_rows(db: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    from pg_ttl.worker.metrics import WorkerMetrics

    _events(db, tmp_path)
    metrics = WorkerMetrics("w1")
    try:
        for result in expire(dsn, ["events"]):
            metrics.record_run("app", "events", result)
        labels = {"database": "app", "table": "events"}
        assert metrics.registry.get_sample_value("pg_ttl_rows_archived_total", labels) == 30
        assert metrics.registry.get_sample_value("pg_ttl_rows_deleted_total", labels) == 40
    finally:
        metrics.shutdown()


def test_plan_shows_what_each_tier_would_move(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                              cli: Any) -> None:
    from pg_ttl.expire import plan

    _events(db, tmp_path)
    plans = {p.action: p for p in plan(db, "events")}
    assert plans["archive"].rows == 30 and plans["archive"].target == "local" and plans["archive"].total_rows == 60
    assert plans["delete"].rows == 10  # past the DELETE tier: deleted, not moved
    out = cli("plan", "events", "--dsn", dsn).stdout
    assert "move to local" in out
    assert db.execute("SELECT count(*) FROM events").fetchone() == (60,) and not list(tmp_path.rglob("*.parquet"))


# -- PostgreSQL: a second database as the target ---------------------------------------

@pytest.fixture
def target_db(dsn: str) -> Any:
    """A second database on the same server, and its DSN as a storage URL (no password)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    name = f"archive_{uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = f"postgresql://{info['user']}@{info['host']}:{info['port']}/{name}?schema=history"
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, dbname=name), autocommit=True) as conn:
            yield url, conn
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_rows_move_to_another_postgresql_once_and_come_back(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                                             target_db: Any, cli: Any) -> None:
    url, target = target_db
    _events(db, tmp_path)
    db.execute("SELECT ttl.create_storage('history', %s)", (url,))
    db.execute("""SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "history"}]')""")
    leaving = db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 21 AND 50 ORDER BY id").fetchall()
    db.commit()
    # as if a batch had committed there and crashed before its DELETE here: rows 21-25 are there already
    target.execute("CREATE SCHEMA history")
    target.execute("CREATE TABLE history.events (id int PRIMARY KEY, created_at timestamptz NOT NULL,"
                   " amount numeric(10, 2), note text, tags jsonb)")
    with target.cursor() as cur:
        cur.executemany("INSERT INTO history.events VALUES (%s, %s, %s, %s, %s::jsonb)", leaving[:5])
    [archived, _] = expire(dsn, ["events"])
    assert archived.status == "ok" and archived.rows_deleted == 30, archived.units
    assert db.execute("SELECT count(*) FROM events WHERE id BETWEEN 21 AND 50").fetchone() == (0,)
    there = target.execute(f"SELECT {COLS} FROM history.events WHERE id > 25 ORDER BY id").fetchall()
    assert there == leaving[5:]  # each row once, as it left
    assert target.execute("SELECT count(*) FROM history.events").fetchone() == (30,)
    assert db.execute("SELECT sum(rows) FROM ttl.archive WHERE storage = 'history'").fetchone() == (30,)
    # the history counts each batch inserted there as an object, and no Parquet bytes
    assert db.execute("SELECT sum(objects_archived), sum(bytes_archived) FROM ttl.run_unit WHERE action = 'archive'"
                      ).fetchone() == db.execute("SELECT count(*), 0 FROM ttl.archive").fetchone()
    db.commit()
    result = cli("restore", "events", "--dsn", dsn)
    assert result.returncode == 0 and "restored 30 rows" in result.stdout, result.stderr
    assert db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 26 AND 50 ORDER BY id").fetchall() == leaving[5:]


def _prepared(target: psycopg.Connection[Any]) -> list[str]:
    return [g for (g,) in target.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")]


def test_a_partition_past_a_postgresql_tier_goes_whole_in_a_prepared_transaction(
        db: psycopg.Connection[Any], dsn: str, target_db: Any) -> None:
    url, target = target_db
    _partitioned(db)  # a two-column key (id, created_at): the storage checks each batch's keys
    db.execute("CREATE TABLE pev_default PARTITION OF pev DEFAULT")  # where restored rows of a dropped one go
    leaving = db.execute("SELECT id, created_at, note FROM pev_old ORDER BY id").fetchall()
    db.execute("SELECT ttl.create_storage('history', %s)", (url,))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "history"}]')""")
    db.commit()
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 10, archived.units
    assert {(u.unit, u.action, u.strategy) for u in archived.units} >= {("pev_old", "drop", "export")}
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    assert target.execute("SELECT id, created_at, note FROM history.pev ORDER BY id").fetchall() == leaving
    assert _prepared(target) == []  # committed there after the source's commit
    [(key, rows)] = db.execute("SELECT object_key, rows FROM ttl.archive").fetchall()
    assert rows == 10 and key.startswith('"history"."pev"#pg_ttl_export_')
    db.execute("SELECT ttl.pause('pev')")
    db.commit()
    assert restore(db, "pev").rows_inserted == 10
    db.commit()
    assert db.execute("SELECT id, created_at, note FROM pev_default ORDER BY id").fetchall() == leaving


@pytest.mark.slow
def test_killed_before_the_source_commits_a_prepared_export_is_rolled_back(
        db: psycopg.Connection[Any], dsn: str, target_db: Any, connect: Any) -> None:
    url, target = target_db
    _partitioned(db)
    db.execute("SELECT ttl.create_storage('history', %s)", (url,))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "history"}]')""")
    db.execute("UPDATE ttl.settings SET value = '60s' WHERE name IN ('lock_timeout', 'row_lock_timeout')")
    db.commit()
    blocker = connect(autocommit=False)
    blocker.execute("LOCK TABLE ttl.archive IN SHARE MODE")  # the export is prepared there, then waits to be listed
    with engine_killed_at(db, dsn, "pev", "%INSERT INTO ttl.archive", blocker.rollback):
        [gid] = _prepared(target)  # durable there, not visible
        assert gid.startswith("pg_ttl_export_")
    assert target.execute("SELECT count(*) FROM history.pev").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pev_old").fetchone() == (10,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    db.commit()
    # the next run rolls the unlisted export back, then exports the partition once
    [archived, _] = expire(dsn, ["pev"])
    assert archived.status == "ok" and archived.rows_deleted == 10
    assert _prepared(target) == []
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    assert target.execute("SELECT count(*), count(DISTINCT id) FROM history.pev").fetchone() == (10, 10)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (1,)


def test_a_prepared_export_is_decided_from_the_manifest(db: psycopg.Connection[Any], target_db: Any) -> None:
    """Exports left prepared: committed when the source lists them (the partition went before
    COMMIT PREPARED), rolled back when only its history names them, others' left alone."""
    from pg_ttl.archive.postgres import PostgresTarget

    url, target = target_db
    target.execute("CREATE TABLE t (id int)")
    gids = {name: f"pg_ttl_export_{uuid4().hex}" for name in ("listed", "unlisted", "others")}
    for n, gid in enumerate(gids.values()):
        with psycopg.connect(psycopg.conninfo.make_conninfo(dsn_of(target)), autocommit=False) as other:
            other.execute("INSERT INTO t VALUES (%s)", (n,))
            other.execute(f"PREPARE TRANSACTION '{gid}'")
    db.execute("CREATE TABLE pev (id int PRIMARY KEY, created_at timestamptz NOT NULL)")
    db.execute("SELECT ttl.enable('pev', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('history', %s)", (url,))
    run = db.execute("INSERT INTO ttl.run (relid, table_name, cutoff) VALUES ('pev'::regclass, 'pev', now())"
                     " RETURNING run_id").fetchone()
    assert run is not None
    db.execute("INSERT INTO ttl.archive (relid, table_name, tier, storage, object_key, rows, bytes, sha256, min_time,"
               " max_time, run_id) VALUES ('pev'::regclass, 'pev', 1, 'history', %s, 1, 0, '', now(), now(), %s)",
               (f"history.pev#{gids['listed']}", run[0]))
    db.execute("INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, checkpoint)"
               " VALUES (%s, 'pev'::regclass, 'pev', 'archive', %s)",
               (run[0], psycopg.types.json.Jsonb({"strategy": "export", "prepared": gids["unlisted"]})))
    db.commit()
    PostgresTarget("history", url).resolve(db)
    assert _prepared(target) == [gids["others"]]
    assert target.execute("SELECT id FROM t").fetchall() == [(0,)]  # the listed one, committed
    target.execute(f"ROLLBACK PREPARED '{gids['others']}'")


def test_a_partition_goes_batch_by_batch_where_the_target_cannot_prepare(db: psycopg.Connection[Any],
                                                                        dsn: str) -> None:
    """A target server with max_prepared_transactions = 0 (a second server, its default)."""
    _partitioned(db)
    second = LocalServer()
    second.start()
    try:
        name = f"archive_{uuid4().hex[:8]}"
        second_dsn = second.create_database(name)
        info = psycopg.conninfo.conninfo_to_dict(second_dsn)
        db.execute("SELECT ttl.create_storage('history', %s)",
                   (f"postgresql://{info['user']}@{info['host']}:{info['port']}/{name}?schema=history",))
        db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "history"}]')""")
        db.commit()
        [archived, _] = expire(dsn, ["pev"])
        assert archived.status == "ok" and archived.rows_deleted == 10, archived.units
        assert {u.unit: u.action for u in archived.units} == {"pev_old": "archive", "pev_new": "archive"}
        assert db.execute("SELECT count(*) FROM pev_old").fetchone() == (0,)  # emptied, not dropped
        with psycopg.connect(second_dsn) as there:
            assert there.execute("SELECT count(*) FROM history.pev").fetchone() == (10,)
    finally:
        second.cleanup()


def test_a_postgresql_storage_keeps_no_password_and_needs_a_key(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    _events(db, tmp_path)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="credentials are never stored"):
        db.execute("SELECT ttl.create_storage('h', 'postgresql://me:secret@host/db')")
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="credentials are never stored"):
        db.execute("SELECT ttl.create_storage('h', 'postgresql://me@host/db?password=secret')")
    db.rollback()
    db.execute("SELECT ttl.create_storage('h', 'postgresql://me@host/db')")
    db.execute("CREATE TABLE nokey (at timestamptz)")
    db.execute("SELECT ttl.enable('nokey', expire_after => '1 day', column_name => 'at')")
    with pytest.raises(psycopg.errors.InvalidTableDefinition, match="needs a primary key"):
        db.execute("""SELECT ttl.set_tiers('nokey', '[{"after": "1 hour", "to": "h"}]')""")


def test_tiers_in_ttl_ddl_describe_and_dump(db: psycopg.Connection[Any], tmp_path: Path, dsn: str, cli: Any) -> None:
    from pg_ttl.ddl.apply import apply

    _events(db, tmp_path)
    apply(db, "ALTER TABLE events SET (ttl_tiers = '20 days TO local, 300 days DELETE');", "m.sql")
    db.commit()
    assert db.execute("SELECT value FROM ttl.describe('events') WHERE option = 'ttl_tiers'").fetchone() == (
        "20 days TO local",)
    assert db.execute("SELECT expire_after::text FROM ttl.policy").fetchone() == ("300 days",)
    dumped = cli("dump", "events", "--dsn", dsn).stdout
    assert "ttl_tiers = '20 days TO local'" in dumped, dumped
    apply(db, "ALTER TABLE events RESET (ttl_tiers);", "m.sql")
    db.commit()
    assert db.execute("SELECT count(*) FROM ttl.tier").fetchone() == (0,)
    # the dump recreates them
    apply(db, dumped, "dump.sql")
    db.commit()
    assert db.execute("SELECT after::text, storage FROM ttl.tier").fetchall() == [("20 days", "local")]
    with pytest.raises(Exception, match="neither"):
        apply(db, "ALTER TABLE events SET (ttl_tiers = '20 days INTO local');", "m.sql")


# -- archive_before_delete, history, metrics and status per tier ----------------------

ABD = ('[{"after": "30 days", "to": "local"},'
       ' {"after": "400 days", "action": "delete", "archive_before_delete": true}]')


def _manifest(db: psycopg.Connection[Any]) -> dict[str, tuple[str, int, int, int, str]]:
    """object key -> (storage, tier, rows, bytes, sha256)."""
    return {str(k): (str(s), int(t), int(n), int(b), str(h)) for k, s, t, n, b, h in db.execute(
        "SELECT object_key, storage, tier, rows, bytes, sha256 FROM ttl.archive").fetchall()}


def _check_objects(db: psycopg.Connection[Any], root: Path) -> list[tuple[Any, ...]]:
    """Every Parquet file under ``root`` is listed by the manifest with its size, SHA-256 and
    row count (read by DuckDB), and nothing else is listed; the rows of all of them."""
    import hashlib

    manifest = _manifest(db)
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.parquet")}
    assert set(files) == set(manifest)
    con = duckdb.connect()
    for key, data in files.items():
        _, _, rows, size, sha = manifest[key]
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha)
        assert con.execute("SELECT count(*) FROM read_parquet(?)", [str(root / key)]).fetchone() == (rows,)
    return _parquet_rows(root)


@pytest.mark.parametrize("before_delete", [True, False], ids=["archive_before_delete", "default"])
def test_rows_past_the_delete_are_archived_once_only_when_asked(db: psycopg.Connection[Any], dsn: str,
                                                               tmp_path: Path, before_delete: bool) -> None:
    _events(db, tmp_path)
    if before_delete:
        db.execute(_tiers(ABD))
    leaving = db.execute(f"SELECT {COLS} FROM events WHERE id > 20 ORDER BY id").fetchall()
    db.commit()
    [archived, deleted] = expire(dsn, ["events"])
    assert (archived.status, deleted.status) == ("ok", "ok")
    assert [r[0] for r in db.execute("SELECT id FROM events ORDER BY id").fetchall()] == list(range(1, 21))
    got = _check_objects(db, tmp_path)
    if before_delete:
        # rows 51-60 (500 days old, past the 400-day DELETE) went to the last storage tier first:
        # each row in exactly one listed, verified object, as it left; the deletion run found none
        assert (archived.rows_deleted, deleted.rows_deleted) == (40, 0)
        assert [r[0] for r in got] == list(range(21, 61))
        assert [(i, t, a, n, str(j).replace("'", '"').replace(" ", "")) for i, t, a, n, j in got] == \
            [(i, t, a, n, j.replace(" ", "")) for i, t, a, n, j in leaving]
        assert sum(n for _, _, n, _, _ in _manifest(db).values()) == 40
    else:  # deleted, not archived
        assert (archived.rows_deleted, deleted.rows_deleted) == (30, 10)
        assert [r[0] for r in got] == list(range(21, 51))


def test_archive_before_delete_never_deletes_a_row_its_archive_run_left(db: psycopg.Connection[Any], dsn: str,
                                                                         connect: Any, tmp_path: Path) -> None:
    """A row past the DELETE that the application holds while the archive run passes (SKIP LOCKED
    leaves it), and a storage that cannot be written: in neither pass is any row past the DELETE
    deleted unarchived; the next pass archives each exactly once."""
    _events(db, tmp_path)
    db.execute(_tiers(ABD))
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM events WHERE id = 55 FOR UPDATE")  # held by the application
    results = expire(dsn, ["events"])
    # the archive run only (its units are archive units): no deletion run in this pass
    assert [(r.status, {u.action for u in r.units}) for r in results] == [("partial", {"archive"})]
    assert db.execute("SELECT id FROM events WHERE id > 50 ORDER BY id").fetchall() == [(55,)]
    db.commit()
    app.rollback()
    # the storage cannot be written now: the archive run fails and nothing past the DELETE goes
    db.execute("INSERT INTO events SELECT 61, now() - interval '500 days', 1, 'x', '{}'")
    db.commit()
    moved = tmp_path.rename(tmp_path.with_name(tmp_path.name + "-away"))
    tmp_path.write_text("not a directory")
    results = expire(dsn, ["events"])
    assert [r.status for r in results] == ["failed"]
    assert db.execute("SELECT id FROM events WHERE id > 50 ORDER BY id").fetchall() == [(55,), (61,)]
    db.commit()
    tmp_path.unlink()
    moved.rename(tmp_path)
    [archived, deleted] = expire(dsn, ["events"])
    assert (archived.status, deleted.status, deleted.rows_deleted) == ("ok", "ok", 0)
    assert db.execute("SELECT count(*) FROM events WHERE id > 20").fetchone() == (0,)
    got = _check_objects(db, tmp_path)  # each row in exactly one listed, verified object
    assert [r[0] for r in got] == list(range(21, 62))


def test_archive_before_delete_to_s3(db: psycopg.Connection[Any], dsn: str, s3: Any, tmp_path: Path) -> None:
    from pyarrow import fs

    endpoint, client = s3
    prefix = f"pg-{uuid4().hex}"
    _events(db, tmp_path / "unused")
    db.execute("SELECT ttl.create_storage('cold', %s)",
               (f"s3://archive-bucket/{prefix}?endpoint={endpoint}&region=us-east-1",))
    db.execute(_tiers(ABD.replace('"local"', '"cold"')))
    leaving = db.execute("SELECT id, created_at, amount, note FROM events WHERE id > 20 ORDER BY id").fetchall()
    db.commit()
    [archived, deleted] = expire(dsn, ["events"])
    assert (archived.status, archived.rows_deleted, deleted.rows_deleted) == ("ok", 40, 0), archived.units
    assert db.execute("SELECT count(*) FROM events WHERE id > 20").fetchone() == (0,)
    # the bucket holds exactly the listed objects; copied here, DuckDB reads each row once
    local = tmp_path / "copy"
    for info in client.get_file_info(fs.FileSelector(f"archive-bucket/{prefix}", recursive=True)):
        if info.type == fs.FileType.File:
            path = local / info.path[len(f"archive-bucket/{prefix}/"):]
            path.parent.mkdir(parents=True, exist_ok=True)
            with client.open_input_stream(info.path) as f:
                path.write_bytes(f.read())
    got = _check_objects(db, local)
    assert [(i, t, a, n) for i, t, a, n, _ in got] == leaving


def test_archive_before_delete_exports_a_partition_past_the_delete_whole(db: psycopg.Connection[Any], dsn: str,
                                                                          tmp_path: Path) -> None:
    db.execute("CREATE TABLE pev (id int, created_at timestamptz NOT NULL, PRIMARY KEY (id, created_at))"
               " PARTITION BY RANGE (created_at)")
    db.execute("CREATE TABLE pev_old PARTITION OF pev FOR VALUES FROM (now() - interval '600 days')"
               " TO (now() - interval '450 days')")
    db.execute("CREATE TABLE pev_new PARTITION OF pev FOR VALUES FROM (now() - interval '450 days')"
               " TO (now() + interval '10 days')")
    db.execute("INSERT INTO pev SELECT g, now() - CASE WHEN g <= 10 THEN interval '500 days'"
               " WHEN g <= 20 THEN interval '40 days' ELSE interval '1 day' END FROM generate_series(1, 30) g")
    db.execute("SELECT ttl.enable('pev', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    db.execute("""SELECT ttl.set_tiers('pev', '[{"after": "30 days", "to": "local"},
                  {"after": "400 days", "action": "delete", "archive_before_delete": true}]')""")
    db.commit()
    [archived, deleted] = expire(dsn, ["pev"])
    assert (archived.status, archived.rows_deleted) == ("ok", 20)
    # pev_old (past the DELETE, archived before it) went whole in the archive run: exported to
    # the last storage tier, then dropped; the deletion run found nothing left to drop
    assert db.execute("SELECT action, strategy, status, rows_deleted FROM ttl.run_unit WHERE run_id = %s"
                      " AND unit_name = 'pev_old'", (archived.run_id,)).fetchone() == ("drop", "export", "ok", 10)
    assert db.execute("SELECT partitions_dropped FROM ttl.run WHERE run_id = %s", (archived.run_id,)).fetchone() == (1,)
    assert deleted.status == "ok" and deleted.partitions_dropped == 0
    assert db.execute("SELECT to_regclass('pev_old')").fetchone() == (None,)
    assert [r[0] for r in db.execute("SELECT id FROM pev ORDER BY id").fetchall()] == list(range(21, 31))
    files = sorted(str(p) for p in tmp_path.rglob("*.parquet"))
    ids = duckdb.connect().execute("SELECT id FROM read_parquet(?) ORDER BY id", [files]).fetchall()
    assert [i for (i,) in ids] == list(range(1, 21))


@pytest.mark.parametrize("spec, error", [
    ('[{"after": "30 days", "to": "local", "archive_before_delete": true}]',
     '"archive_before_delete" belongs to the final'),
    ('[{"after": "30 days", "to": "local"}, {"after": "400 days", "action": "delete", "archive_before_delete": 1}]',
     '"archive_before_delete" must be true or false, got 1'),
    ('[{"after": "400 days", "action": "delete", "archive_before_delete": true}]', "needs a storage tier"),
    ('[{"after": "30 days", "to": "local", "archive_befor_delete": true}]', 'unknown key "archive_befor_delete"'),
    ('[{"after": "30 days", "to": "local", "action": "delete"}]', "not both"),
])
def test_bad_archive_before_delete_is_refused_and_changes_nothing(db: psycopg.Connection[Any], tmp_path: Path,
                                                                 spec: str, error: str) -> None:
    _events(db, tmp_path)
    db.execute(_tiers(ABD))
    db.commit()
    state = ("SELECT (SELECT json_agg(t ORDER BY position) FROM ttl.tier t),"
             " (SELECT expire_after FROM ttl.policy)")
    before = db.execute(state).fetchone()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=error):
        db.execute(_tiers(spec))
    db.rollback()
    assert db.execute(state).fetchone() == before
    assert db.execute("SELECT archive_before_delete FROM ttl.tier").fetchall() == [(True,)]


def test_archive_before_delete_in_ttl_ddl_describe_and_dump(db: psycopg.Connection[Any], tmp_path: Path, dsn: str,
                                                            cli: Any) -> None:
    from pg_ttl.ddl.apply import apply

    _events(db, tmp_path)
    spec = ('[{"after": "20 days", "to": "local"},'
            ' {"after": "300 days", "action": "delete", "archive_before_delete": true}]')
    apply(db, f"ALTER TABLE events SET (ttl_tiers = '{spec}');", "m.sql")
    db.commit()
    assert db.execute("SELECT value FROM ttl.describe('events') WHERE option = 'ttl_tiers'").fetchone() == (spec,)
    assert db.execute("SELECT expire_after::text FROM ttl.policy").fetchone() == ("300 days",)
    assert "archive_before_delete" in cli("describe", "events", "--dsn", dsn).stdout
    dumped = cli("dump", "events", "--dsn", dsn).stdout
    assert f"ttl_tiers = '{spec}'" in dumped, dumped
    apply(db, "ALTER TABLE events RESET (ttl_tiers);", "m.sql")
    db.commit()
    assert db.execute("SELECT count(*) FROM ttl.tier").fetchone() == (0,)
    apply(db, dumped, "dump.sql")  # the dump recreates them, the option included
    db.commit()
    assert db.execute("SELECT after::text, storage, archive_before_delete FROM ttl.tier").fetchall() == [
        ("20 days", "local", True)]
    assert db.execute("SELECT expire_after::text FROM ttl.policy").fetchone() == ("300 days",)
    # tiers set again without it: replaced, the option too
    apply(db, "ALTER TABLE events SET (ttl_tiers = '20 days TO local');", "m.sql")
    db.commit()
    assert db.execute("SELECT archive_before_delete FROM ttl.tier").fetchall() == [(False,)]
    assert db.execute("SELECT value FROM ttl.describe('events') WHERE option = 'ttl_tiers'").fetchone() == (
        "20 days TO local",)


def _two_tiers(db: psycopg.Connection[Any], tmp_path: Path) -> None:
    """events (see _events) with tiers to 'local' at 30 days and 'deep' at 300 days, archiving
    before the DELETE at 400: rows 21-50 are local's, rows 51-60 deep's."""
    _events(db, tmp_path / "local")
    db.execute("SELECT ttl.create_storage('deep', %s)", (f"file://{tmp_path / 'deep'}",))
    db.execute(_tiers('[{"after": "30 days", "to": "local"}, {"after": "300 days", "to": "deep"},'
                      ' {"after": "400 days", "action": "delete", "archive_before_delete": true}]'))
    db.commit()


def test_history_and_metrics_count_bytes_and_objects_per_tier(db: psycopg.Connection[Any], dsn: str,
                                                              tmp_path: Path) -> None:
    import urllib.request

    from pg_ttl.worker.metrics import WorkerMetrics

    _two_tiers(db, tmp_path)
    metrics = WorkerMetrics("w1")
    try:
        results = expire(dsn, ["events"])
        for result in results:
            metrics.record_run("app", "events", result)
        per_tier: dict[tuple[str, int], list[int]] = {}
        for storage, tier, rows, size, _ in _manifest(db).values():
            counted = per_tier.setdefault((storage, tier), [0, 0, 0])
            counted[0], counted[1], counted[2] = counted[0] + rows, counted[1] + size, counted[2] + 1
        assert {k: v[0] for k, v in per_tier.items()} == {("local", 1): 30, ("deep", 2): 10}
        # the archive unit's history: rows moved, bytes and objects written
        unit = db.execute("SELECT rows_deleted, bytes_archived, objects_archived FROM ttl.run_unit"
                          " WHERE run_id = %s AND action = 'archive'", (results[0].run_id,)).fetchone()
        assert unit == tuple(sum(v[i] for v in per_tier.values()) for i in range(3))
        assert db.execute("SELECT sum(bytes_archived) FROM ttl.run_unit WHERE action <> 'archive'").fetchone() == (0,)
        for (storage, tier), (_, size, objects) in per_tier.items():
            labels = {"database": "app", "table": "events", "storage": storage, "tier": str(tier)}
            assert metrics.registry.get_sample_value("pg_ttl_archive_bytes_total", labels) == size > 0
            assert metrics.registry.get_sample_value("pg_ttl_archive_objects_total", labels) == objects > 0
        assert metrics.registry.get_sample_value("pg_ttl_rows_archived_total",
                                                 {"database": "app", "table": "events"}) == 40
        # served by the worker's endpoint
        port = metrics.serve("127.0.0.1", 0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        assert f'pg_ttl_archive_bytes_total{{database="app",storage="deep",table="events",tier="2"}} ' \
               f'{float(per_tier[("deep", 2)][1])}' in text
        assert 'pg_ttl_archive_objects_total{database="app",storage="local",table="events",tier="1"}' in text
        metrics.forget_table("app", "events")
        assert metrics.registry.get_sample_value("pg_ttl_archive_bytes_total", {
            "database": "app", "table": "events", "storage": "deep", "tier": "2"}) is None
    finally:
        metrics.shutdown()


def test_status_shows_the_archive_backlog_per_tier(db: psycopg.Connection[Any], dsn: str, tmp_path: Path,
                                                   cli: Any) -> None:
    import json

    _two_tiers(db, tmp_path)

    def backlog(*flags: str) -> list[dict[str, Any]]:
        result = cli("status", "events", "--dsn", dsn, "--json", *flags)
        assert result.returncode == 0, result.stderr
        return list(json.loads(result.stdout)["tables"][0]["archive_backlog"])

    assert backlog() == [{"tier": 1, "storage": "local", "rows": 30, "exact": True},
                         {"tier": 2, "storage": "deep", "rows": 10, "exact": True}]
    assert [b["rows"] for b in backlog("--no-estimates")] == [None, None]
    text = cli("status", "--dsn", dsn).stdout
    assert "to archive" in text and "local 30, deep 10" in text, text
    expire(dsn, ["events"])
    assert [(b["rows"], b["exact"]) for b in backlog()] == [(0, True), (0, True)]
    # a table without tiers has no archive backlog
    db.execute("CREATE TABLE plain (at timestamptz)")
    db.execute("SELECT ttl.enable('plain', expire_after => '1 day', column_name => 'at')")
    db.commit()
    result = json.loads(cli("status", "plain", "--dsn", dsn, "--json").stdout)
    assert result["tables"][0]["archive_backlog"] == []


def test_status_estimates_the_archive_backlog_of_a_large_table(db: psycopg.Connection[Any], tmp_path: Path,
                                                               connect: Any, monkeypatch: Any) -> None:
    from pg_ttl.worker import status

    db.execute("CREATE TABLE big (id int PRIMARY KEY, created_at timestamptz NOT NULL, pad text)")
    db.execute("INSERT INTO big SELECT g, now() - CASE WHEN g % 4 = 0 THEN interval '40 days'"
               " ELSE interval '1 day' END, repeat('x', 100) FROM generate_series(1, 40000) g")
    db.execute("SELECT ttl.enable('big', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{tmp_path}",))
    db.execute("""SELECT ttl.set_tiers('big', '[{"after": "30 days", "to": "local"}]')""")
    db.commit()
    pages = db.execute("SELECT pg_relation_size('big') / 8192").fetchone()
    assert pages is not None and pages[0] > 400
    conn = connect()
    [exact] = status.collect(conn, "big").tables[0].archive_backlog
    assert (exact.rows, exact.exact) == (10_000, True)
    monkeypatch.setattr(status, "ARCHIVE_SCAN_PAGES", 100)  # a sample of about 100 pages
    [estimate] = status.collect(conn, "big").tables[0].archive_backlog
    assert not estimate.exact and estimate.rows is not None and 7_000 <= estimate.rows <= 13_000, estimate
