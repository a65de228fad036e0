"""Tiers (sql/82_tiers.sql, pg_ttl/expire/tiers.py, pg_ttl/archive): rows that
reach a storage tier are written to a directory as Parquet, verified, recorded
and deleted in one transaction; DuckDB reads them back as they left; restore is
idempotent; a crash between writing and deleting loses and duplicates nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import uuid4

import duckdb
import psycopg
import pytest

from pg_ttl.expire import expire

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


@pytest.mark.slow
def test_killed_between_writing_and_deleting_loses_and_duplicates_nothing(db: psycopg.Connection[Any], dsn: str,
                                                                          tmp_path: Path, connect: Any) -> None:
    _events(db, tmp_path)
    db.execute("UPDATE ttl.settings SET value = '60s' WHERE name = 'lock_timeout'")
    db.commit()
    blocker = connect(autocommit=False)
    blocker.execute("LOCK TABLE events IN SHARE MODE")  # lets the batch lock its rows, not delete them
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", "events", "--quiet", "--dsn", dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            waiting = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"
                                 " AND wait_event_type = 'Lock' AND query LIKE 'DELETE%'").fetchone()
            db.commit()
            if waiting and waiting[0]:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the engine never reached its DELETE")
        written = list(tmp_path.rglob("*.parquet"))
        assert written  # the object was written and verified before the DELETE
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
        blocker.rollback()
    for _ in range(200):
        gone = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'").fetchone()
        db.commit()
        if gone == (0,):
            break
        time.sleep(0.05)
    # nothing committed: every row still here, no object listed, the written one unlisted
    assert db.execute("SELECT count(*) FROM events").fetchone() == (60,)
    assert db.execute("SELECT count(*) FROM ttl.archive").fetchone() == (0,)
    db.execute("UPDATE ttl.settings SET value = '1s' WHERE name = 'lock_timeout'")
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
    db.commit()
    result = cli("restore", "events", "--dsn", dsn)
    assert result.returncode == 0 and "restored 30 rows" in result.stdout, result.stderr
    assert db.execute(f"SELECT {COLS} FROM events WHERE id BETWEEN 26 AND 50 ORDER BY id").fetchall() == leaving[5:]


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
