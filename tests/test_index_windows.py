"""Row expiry over a btree on the TTL column: key windows (rows.py, ranges.py).

Each window is [k1, k2) with k2 read as the key a step of expired rows on; its DELETE
re-checks the expiry. These tests hold the engine to what that promises: where a
stopped run's next run starts, how large a window is (by time, capped; under a rate
limit at delete_batch_size), and that a key with more rows than a window holds is
deleted in ctid windows of at most delete_batch_size rows, with the windows going on
past it.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from helpers import StopAfter

from pg_ttl.expire import expire, ranges
from pg_ttl.expire.context import NullProgress


class Sizes(NullProgress):
    def __init__(self) -> None:
        self.deleted: list[int] = []

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.deleted.append(deleted)


def _table(db: psycopg.Connection[Any], expired: int, sbs: int = 300, dbs: int = 70, rate: int = 0) -> None:
    """``expired`` rows one second apart in 2020, 100 live ones; key windows forced."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x' "
               "FROM generate_series(1, %s::int) g", (expired,))
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(%s::int, %s::int) g",
               (expired + 1, expired + 100))
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => %s,"
               " delete_batch_size => %s, delete_rate_limit => %s)", (sbs, dbs, rate))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def test_a_stopped_run_resumes_at_the_window_its_checkpoint_ends(
        db: psycopg.Connection[Any], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db, 3000)
    stop = threading.Event()
    [res] = expire(dsn, stop=stop, progress=StopAfter(stop, 3))
    assert res.status == "partial" and 0 < res.rows_deleted < 3000
    [cp] = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchone()
    assert cp["strategy"] == "index" and cp["from"] is not None
    # every expired row below the checkpoint's key went; every one from it on is there
    below, above = db.execute("SELECT count(*) FILTER (WHERE v < %(k)s), count(*) FILTER (WHERE v >= %(k)s)"
                              " FROM w WHERE v < '2999-01-01'", {"k": cp["from"]}).fetchone()
    assert (below, above) == (0, 3000 - res.rows_deleted)
    db.commit()
    starts: list[ranges.WindowStart] = []
    original = ranges.window_end

    def recording(ctx: Any, start: ranges.WindowStart, step: int) -> str | None:
        starts.append(start)
        return original(ctx, start, step)

    monkeypatch.setattr(ranges, "window_end", recording)
    first = res.rows_deleted
    [res] = expire(dsn)
    # the next run's first window begins at the checkpoint's key, inclusive
    assert (starts[0].key, starts[0].inclusive) == (cp["from"], True)
    assert res.status == "ok" and res.rows_deleted == 3000 - first
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_windows_grow_by_time_up_to_select_batch_size(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 3000)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 3000 and sum(sizes.deleted) == 3000
    # the first window: delete_batch_size rows; then larger (a 70-row DELETE takes far less
    # than 50 ms), never over select_batch_size
    assert sizes.deleted[0] == 70 and max(sizes.deleted) == 300 and len(sizes.deleted) < 3000 / 70


def test_under_a_rate_limit_windows_stay_at_delete_batch_size(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 1000, rate=20_000)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 1000
    assert max(sizes.deleted) <= 70 and len(sizes.deleted) >= 1000 / 70


def test_a_key_with_more_rows_than_a_window_goes_in_ctid_windows_and_the_windows_go_on(
        db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    # 50 keys of one row, 500 rows of one key, 50 keys of one row (all expired), 100 live
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x' "
               "FROM generate_series(1, 50) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-02', 'x' FROM generate_series(51, 550) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-03' + g * interval '1 s', 'x' "
               "FROM generate_series(551, 600) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(601, 700) g")
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 200,"
               " delete_batch_size => 40, delete_rate_limit => 1000000)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 600
    assert max(sizes.deleted) <= 40  # paced: windows and the key's ctid windows alike
    assert db.execute("SELECT count(*), min(v) FROM w").fetchone()[0] == 100
