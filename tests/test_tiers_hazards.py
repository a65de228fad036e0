"""Tiers against what happens around them: a table rewritten between a range's read and
its DELETE, a connection lost at COMMIT, generated and identity columns, intervals archived
in another IntervalStyle."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq

from pg_ttl.archive.restore import restore
from pg_ttl.expire import expire
from pg_ttl.expire.tiers import batches


def _tier(db: psycopg.Connection[Any], storage: Path, table: str = "events") -> None:
    db.execute(f"SELECT ttl.enable('{table}', expire_after => '400 days', column_name => 'created_at')")
    db.execute("SELECT ttl.create_storage('local', %s)", (f"file://{storage}",))
    db.execute(f"""SELECT ttl.set_tiers('{table}', '[{{"after": "30 days", "to": "local"}}]')""")
    db.commit()


def _archived_and_restored(db: psycopg.Connection[Any], dsn: str, tmp_path: Path, rows: int) -> None:
    """events' ``rows`` rows archived to a directory tier and deleted by a pass, then restored:
    the same rows as before, every column."""
    _tier(db, tmp_path)
    before = db.execute("SELECT * FROM events ORDER BY id").fetchall()
    db.commit()
    expire(dsn, ["events"])
    assert db.execute("SELECT count(*) FROM events").fetchone() == (0,)
    db.commit()
    done = restore(db, "events")
    db.commit()
    assert done.rows_inserted == rows
    assert db.execute("SELECT * FROM events ORDER BY id").fetchall() == before


def test_rows_of_a_table_with_a_generated_column_can_be_restored(db: psycopg.Connection[Any], dsn: str,
                                                                  tmp_path: Path) -> None:
    """The archive writes every column, the stored generated ones too (objects.COLUMNS keeps
    them), but restore only knows the non-generated columns (restore.COLUMNS filters
    attgenerated) and refuses the object: "has columns the table no longer has". Every row
    archived from such a table has been deleted and can never be restored by pg-ttl restore."""
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, amount numeric(10, 2),"
               " doubled numeric GENERATED ALWAYS AS (amount * 2) STORED)")
    db.execute("INSERT INTO events (id, created_at, amount) SELECT g, now() - interval '40 days', g"
               " FROM generate_series(1, 10) g")
    _archived_and_restored(db, dsn, tmp_path, 10)


def test_rows_of_a_table_with_an_identity_always_key_can_be_restored(db: psycopg.Connection[Any], dsn: str,
                                                                      tmp_path: Path) -> None:
    """``id bigint GENERATED ALWAYS AS IDENTITY`` (the usual events table): restore inserts
    the archived ids without OVERRIDING SYSTEM VALUE (restore._copy_in and the INSERT of
    restore()), which PostgreSQL refuses ("cannot insert a non-DEFAULT value into column
    id"): the archived rows cannot be brought back."""
    db.execute("CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
               " created_at timestamptz NOT NULL, note text)")
    db.execute("INSERT INTO events (created_at, note) SELECT now() - interval '40 days', 'n' || g"
               " FROM generate_series(1, 10) g")
    _archived_and_restored(db, dsn, tmp_path, 10)


def test_an_interval_comes_back_as_it_was_whatever_the_sessions_intervalstyle(db: psycopg.Connection[Any], dsn: str,
                                                                               tmp_path: Path) -> None:
    """Intervals are archived in their text form, in whatever IntervalStyle the engine's
    session inherited (engine.connect pins TimeZone, DateStyle, bytea_output and
    extra_float_digits, not IntervalStyle). With IntervalStyle sql_standard (a database or
    role default) interval '-1 day -02:03:04' is written "-1 2:03:04", which a restore in the
    default postgres style reads as -1 day +02:03:04: the restored row differs."""
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, span interval)")
    db.execute("INSERT INTO events VALUES (1, now() - interval '40 days', interval '-1 day -02:03:04')")
    _tier(db, tmp_path)
    dbname = db.info.dbname
    db.execute(f'ALTER DATABASE "{dbname}" SET IntervalStyle = sql_standard')
    db.commit()
    try:
        expire(dsn, ["events"])
    finally:
        db.execute(f'ALTER DATABASE "{dbname}" RESET IntervalStyle')
        db.commit()
    assert db.execute("SELECT count(*) FROM events").fetchone() == (0,)
    db.commit()
    restore(db, "events")
    db.commit()
    assert db.execute("SELECT span = interval '-1 day -02:03:04' FROM events").fetchone() == (True,)


def test_a_table_rewritten_between_read_and_delete_loses_no_row(db: psycopg.Connection[Any], dsn: str,
                                                                  tmp_path: Path, connect: Any,
                                                                  monkeypatch: Any) -> None:
    """A range's DELETE identifies "the row versions written" by ctid range and xmin
    (batches._commit_range). VACUUM FULL or CLUSTER (which an operator runs to give back the
    space TTL freed) rewrites the table between the read and the DELETE: ctids change, xmins
    stay. A bulk-loaded table has one xmin, so the DELETE of range k now deletes the rows the
    rewrite moved there (range k+1's), the count matches, it commits; the last range finds
    nothing, its objects are removed. Rows are deleted that no listed object holds (and rows
    archived stay in the table)."""
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, pad text)")
    db.execute("INSERT INTO events SELECT g, now() - interval '40 days', repeat('x', 60)"
               " FROM generate_series(1, 4000) g")
    db.execute("ANALYZE events")
    _tier(db, tmp_path)
    db.execute("UPDATE ttl.policy SET archive_batch_size = 1000 WHERE relid = 'events'::regclass")
    before = {r[0]: r for r in db.execute("SELECT id, created_at, pad FROM events").fetchall()}
    db.commit()
    other = connect(autocommit=True)
    commit_range = batches._commit_range
    calls = []

    def rewritten_first(sweep: Any, written: Any, returning: Any) -> None:
        calls.append(written.lo)
        if len(calls) == 2:  # the first range committed; the others read (or being read)
            other.execute("VACUUM FULL events")
        commit_range(sweep, written, returning)

    monkeypatch.setattr(batches, "_commit_range", rewritten_first)
    expire(dsn, ["events"])
    assert len(calls) >= 3
    listed = [str(k) for (k,) in db.execute("SELECT object_key FROM ttl.archive").fetchall()]
    archived = {r["id"] for k in listed for r in pq.read_table(tmp_path / k).to_pylist()}
    here = {i for (i,) in db.execute("SELECT id FROM events").fetchall()}
    lost = sorted(set(before) - archived - here)
    assert lost == [], f"{len(lost)} rows deleted and in no listed object, e.g. {lost[:5]}"


class _CutAtCommit:
    """A TCP proxy to the server that, once, forwards the COMMIT of a range's DELETE to the
    server, lets it commit there, and then cuts the connection before the client hears the
    answer (a network failure at the worst moment)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            state = {"delete": False}
            threading.Thread(target=self._pump, args=(client, server, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, state, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict[str, bool], upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and b"xmin = ANY(" in data:
                    state["delete"] = True
                if not upstream and state.get("cut"):
                    break
                if upstream and state["delete"] and b"COMMIT\x00" in data and not self.cut.is_set():
                    self.cut.set()
                    state["cut"] = True  # the server's answer is not forwarded any more
                    dst.sendall(data)
                    time.sleep(0.5)  # committed there; the answer never comes back
                    for s in (src, dst):
                        with contextlib.suppress(OSError):
                            s.shutdown(socket.SHUT_RDWR)
                            s.close()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()


def test_a_connection_lost_at_commit_does_not_remove_the_objects_of_a_committed_range(
        db: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    """batches._commit_range removes a range's objects on any exception of its transaction,
    including one raised by the COMMIT itself (the connection lost after the server
    committed): the rows are deleted and the manifest lists the objects, but the objects are
    gone. exports.py guards the same cleanup with ``if not conn.broken``; batches does not."""
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, note text)")
    db.execute("INSERT INTO events SELECT g, now() - interval '40 days', 'n' || g FROM generate_series(1, 100) g")
    _tier(db, tmp_path)
    db.commit()
    proxy = _CutAtCommit(db.info.host, db.info.port)
    with contextlib.suppress(psycopg.OperationalError):  # the engine's connection was lost: it may raise it
        expire(psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port), ["events"])
    assert proxy.cut.is_set()
    listed = [str(k) for (k,) in db.execute("SELECT object_key FROM ttl.archive").fetchall()]
    deleted = 100 - db.execute("SELECT count(*) FROM events").fetchone()[0]
    assert deleted > 0 and listed  # the range committed on the server
    missing = [k for k in listed if not (tmp_path / k).exists()]
    assert missing == [], f"{deleted} rows deleted, their listed objects removed: {missing}"
