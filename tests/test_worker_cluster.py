"""Several workers on one database, a server restart under a running worker, and the idle cost."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl import install
from pg_ttl.localserver import LocalServer
from pg_ttl.worker.schedule import latest_tick
from tests.helpers import standby_of
from tests.worker_proc import WorkerProcess, scrape, wait_until

FAST = ("--poll-interval", "0.5", "--max-backoff", "1")
PARTITIONS = 12
EXPIRED_PER_PARTITION = 1500


def _partitioned(conn: psycopg.Connection[Any], rate: int = 4000) -> None:
    conn.execute("CREATE TABLE pt (id bigint PRIMARY KEY, created_at timestamptz NOT NULL) PARTITION BY HASH (id)")
    for i in range(PARTITIONS):
        conn.execute(f"CREATE TABLE pt_{i:02d} PARTITION OF pt FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {i})")
    # Hash partitions are always row-deletion units: every partition is real work.
    conn.execute("INSERT INTO pt SELECT g, now() - interval '3 days' FROM generate_series(1, %s) g",
                 (PARTITIONS * EXPIRED_PER_PARTITION,))
    conn.execute("INSERT INTO pt SELECT g, now() FROM generate_series(1000001, 1000240) g")
    conn.execute("ANALYZE pt")
    # Slow enough (rate-limited per worker) that the workers overlap.
    conn.execute("SELECT ttl.enable('pt', expire_after => '1 day', column_name => 'created_at', "
                 "delete_batch_size => 100, select_batch_size => 500, delete_rate_limit => %s)", (rate,))


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "late"), [(2, 0), (3, 1)])
def test_workers_split_a_partitioned_table_without_overlap(dsn: str, connect: Any, workers: int, late: int) -> None:
    """``late`` workers start only once the others have finished a few partitions: they join the
    round and must not redo the finished ones."""
    conn = connect()
    _partitioned(conn, rate=2000 if late else 4000)
    expired_by_partition = dict(conn.execute(
        "SELECT tableoid::regclass::text, count(*) FROM pt WHERE created_at < now() - interval '1 day' "
        "GROUP BY 1").fetchall())
    procs = [WorkerProcess("--dsn", dsn, "--name", f"w{i}", *FAST) for i in range(1, workers - late + 1)]
    try:
        if late:
            wait_until(lambda: conn.execute("SELECT count(*) FROM ttl.run_unit WHERE status = 'ok' "
                                            "AND action = 'delete'").fetchone()[0] >= 4, what="4 partitions done")
            procs += [WorkerProcess("--dsn", dsn, "--name", f"w{i}", *FAST)
                      for i in range(workers - late + 1, workers + 1)]
        for p in procs:
            p.wait_for("run finished", table="pt", timeout=40)
        for p in procs:
            assert p.stop() == 0
    finally:
        for p in procs:
            p.close()
    assert conn.execute("SELECT count(*) FROM pt WHERE created_at < now() - interval '1 day'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pt").fetchone() == (240,)
    runs = conn.execute("SELECT run_id, worker, cutoff, status, rows_deleted FROM ttl.run ORDER BY run_id").fetchall()
    # One round: one run per worker, all with the round's cutoff.
    assert sorted(r[1] for r in runs) == [f"w{i}" for i in range(1, workers + 1)]
    assert len({r[2] for r in runs}) == 1
    assert sum(r[4] for r in runs) == PARTITIONS * EXPIRED_PER_PARTITION
    # The work was split: every worker deleted rows.
    assert all(r[4] > 0 for r in runs), runs
    units = conn.execute(
        "SELECT u.unit_name, r.worker, u.action, u.status, u.rows_deleted FROM ttl.run_unit u "
        "JOIN ttl.run r USING (run_id) ORDER BY u.unit_name, u.started_at").fetchall()
    worked = {}
    for name, worker, action, status, deleted in units:
        if action == "skip":
            assert status == "skipped"
            continue
        # No unit processed twice: one worker deleted each partition's rows, all of them.
        assert name not in worked, f"{name} processed by {worked.get(name)} and {worker}: {units}"
        worked[name] = worker
        assert status == "ok" and deleted == expired_by_partition[name], (name, deleted)
    assert sorted(worked) == sorted(expired_by_partition)
    if late:
        # The late worker met finished partitions and left them alone.
        done_skips = [u for u in units if u[1] == f"w{workers}" and u[2] == "skip"]
        assert done_skips, units


@pytest.mark.slow
def test_a_late_worker_joins_the_round_of_a_big_table_and_takes_other_ranges(dsn: str, connect: Any) -> None:
    """A plain table of many ranges of row_range_bytes (64 kB here): a worker that starts
    while another sweeps it joins the round and takes ranges the first has not; every range
    is done once, all expired rows go."""
    conn = connect()
    conn.execute("CREATE TABLE big (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, body text)")
    conn.execute("INSERT INTO big (created_at, body) SELECT now() - CASE WHEN g % 4 = 0 THEN interval '1 hour'"
                 " ELSE interval '3 days' END, repeat('x', 200) FROM generate_series(1, 20000) g")
    conn.execute("VACUUM ANALYZE big")
    # each DELETE takes a while: the second worker arrives with most ranges still to do
    conn.execute("CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$"
                 " BEGIN PERFORM pg_sleep(0.02); RETURN NULL; END $$")
    conn.execute("CREATE TRIGGER slow AFTER DELETE ON big FOR EACH STATEMENT EXECUTE FUNCTION slow()")
    conn.execute("UPDATE ttl.settings SET value = '64kB' WHERE name = 'row_range_bytes'")
    conn.execute("SELECT ttl.enable('big', expire_after => '1 day', column_name => 'created_at')")
    procs = [WorkerProcess("--dsn", dsn, "--name", "w1", *FAST)]
    try:
        wait_until(lambda: conn.execute("SELECT count(*) FROM ttl.block_range WHERE work = 'delete'"
                                        " AND status = 'ok'").fetchone()[0] >= 3, what="3 ranges done")
        procs.append(WorkerProcess("--dsn", dsn, "--name", "w2", *FAST))
        for p in procs:
            p.wait_for("run finished", table="big", timeout=60)
        for p in procs:
            assert p.stop() == 0
    finally:
        for p in procs:
            p.close()
    assert conn.execute("SELECT count(*) FROM big").fetchone() == (5000,)
    runs = conn.execute("SELECT r.worker, r.cutoff, u.strategy, u.rows_deleted FROM ttl.run r"
                        " JOIN ttl.run_unit u USING (run_id) ORDER BY r.worker").fetchall()
    assert [r[0] for r in runs] == ["w1", "w2"] and len({r[1] for r in runs}) == 1  # one round
    assert {r[2] for r in runs} == {"ranges"} and all(r[3] > 0 for r in runs), runs  # both deleted
    assert sum(r[3] for r in runs) == 15000
    done = conn.execute("SELECT range_no FROM ttl.block_range WHERE work = 'delete' AND status = 'ok'"
                        " ORDER BY range_no").fetchall()
    assert [n for (n,) in done] == list(range(len(done)))  # every range, once


def test_two_workers_deciding_at_once_start_and_join(dsn: str, connect: Any) -> None:
    """Two workers that reach a table's tick at the same moment: one starts the round,
    the other joins it; neither takes the other (still deciding) for a runner and skips."""
    import threading

    conn = connect()
    _ttl_table(conn, "t")
    relid = conn.execute("SELECT 't'::regclass::oid").fetchone()[0]
    tick = latest_tick("@hourly", datetime.now(UTC))
    conn.execute("INSERT INTO ttl.worker_schedule (relid) VALUES (%s)", (relid,))
    holder = connect(autocommit=False)  # holds the schedule row while both workers arrive
    holder.execute("SELECT 1 FROM ttl.worker_schedule WHERE relid = %s FOR UPDATE", (relid,))
    verdicts: list[str] = []
    both_decided = threading.Barrier(2, timeout=10)  # nobody ends its run before the other has decided

    def decide(name: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as worker:
            row = worker.execute("SELECT verdict FROM ttl.worker_begin_run(%s, %s, %s)",
                                 (relid, tick, name)).fetchone()
            verdicts.append(row[0])
            both_decided.wait()

    threads = [threading.Thread(target=decide, args=(f"w{i}",)) for i in (1, 2)]
    for t in threads:
        t.start()
    wait_until(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND query LIKE '%worker_begin_run%'").fetchone()[0] == 2,
               what="both workers waiting on the schedule row")
    holder.commit()
    for t in threads:
        t.join(10)
    assert sorted(verdicts) == ["join", "start"]


# -- a server of our own: restarted, cloned into a standby, and its statement log counted ---------------
@pytest.fixture(scope="module")
def own_server() -> Iterator[LocalServer]:
    server = LocalServer(settings={"log_statement": "all", "log_line_prefix": "@%d@%a@",
                                   "max_wal_senders": "4"})
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def _fresh_db(server: LocalServer, name: str) -> str:
    dsn = server.create_database(name)
    install.upgrade(dsn)
    return dsn


def _ttl_table(conn: psycopg.Connection[Any], name: str, expired: int = 10, live: int = 2) -> None:
    conn.execute(f"CREATE TABLE {name} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute(f"INSERT INTO {name} (created_at) SELECT now() - interval '2 days' FROM generate_series(1, %s)",
                 (expired,))
    conn.execute(f"INSERT INTO {name} (created_at) SELECT now() FROM generate_series(1, %s)", (live,))
    conn.execute(f"SELECT ttl.enable('{name}', expire_after => '1 day', column_name => 'created_at')")


@pytest.mark.slow
def test_worker_survives_a_server_restart(own_server: LocalServer) -> None:
    dsn = _fresh_db(own_server, "restart")
    conn = psycopg.connect(dsn, autocommit=True)
    w = WorkerProcess("--dsn", dsn, "--metrics-addr", "127.0.0.1:0", *FAST)
    try:
        _ttl_table(conn, "before")
        w.wait_for("run finished", table="before")
        conn.close()
        own_server.restart()
        w.wait_for("database unavailable")
        w.wait_for("connected", count=2, timeout=30)
        # LISTEN is back and runs go on: a policy created after the restart runs.
        conn = psycopg.connect(dsn, autocommit=True)
        _ttl_table(conn, "after")
        w.wait_for("run finished", table="after")
        assert conn.execute("SELECT count(*) FROM after").fetchone() == (2,)
        m = scrape(w.metrics_port)
        assert m['pg_ttl_reconnects_total{database="restart"}'] >= 1
        assert m['pg_ttl_database_up{database="restart"}'] == 1
        assert w.stop() == 0
    finally:
        w.close()
        conn.close()


@pytest.mark.slow
def test_server_restart_mid_run_resumes_the_round(own_server: LocalServer) -> None:
    dsn = _fresh_db(own_server, "midrun")
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TABLE slow (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO slow (created_at) SELECT now() - interval '2 days' FROM generate_series(1, 6000)")
    conn.execute("SELECT ttl.enable('slow', expire_after => '1 day', column_name => 'created_at', "
                 "delete_batch_size => 100, delete_rate_limit => 3000)")
    w = WorkerProcess("--dsn", dsn, *FAST)
    try:
        w.wait_for("run started", table="slow")
        wait_until(lambda: conn.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.run_unit").fetchone()[0]
                   >= 300, what="some batches")
        conn.close()
        own_server.stop("immediate")  # a crash: nothing is shut down cleanly
        own_server.start()
        resumed = w.wait_for("run started", count=2, table="slow", timeout=30)[1]
        assert resumed["role"] == "resume"
        w.wait_for("run finished", table="slow", status="ok", timeout=30)
        assert w.stop() == 0
    finally:
        w.close()
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM slow").fetchone() == (0,)
        runs = c.execute("SELECT cutoff, rows_deleted FROM ttl.run ORDER BY run_id").fetchall()
        assert len(runs) == 2 and runs[0][0] == runs[1][0]  # one round, one cutoff
        # Rows deleted before the crash were committed with their count: nothing counted twice or lost.
        assert sum(r[1] for r in runs) == 6000


@pytest.mark.slow
def test_standby_waits_and_never_deletes_until_promoted(own_server: LocalServer) -> None:
    dsn = _fresh_db(own_server, "standbydb")
    with psycopg.connect(dsn, autocommit=True) as conn:
        _ttl_table(conn, "ev", expired=7, live=3)
    standby = standby_of(own_server)
    try:
        sdsn = standby.dsn("standbydb")
        with psycopg.connect(sdsn, autocommit=True) as s:
            wait_until(lambda: s.execute("SELECT count(*) FROM ttl.policy").fetchone() == (1,), what="replay")
        w = WorkerProcess("--dsn", sdsn, "--metrics-addr", "127.0.0.1:0", *FAST)
        try:
            w.wait_for("database is a standby: waiting, nothing will be deleted")
            time.sleep(1.5)  # three polls
            assert not w.find("run started")
            assert scrape(w.metrics_port)['pg_ttl_database_standby{database="standbydb"}'] == 1
            subprocess.run(standby._cmd(str(standby.bindir / "pg_ctl"), "-D", str(standby.datadir), "-w",
                                        "promote"), check=True, capture_output=True)
            w.wait_for("database is a primary: running policies", timeout=15)
            w.wait_for("run finished", table="ev")
            assert w.stop() == 0
        finally:
            w.close()
        with psycopg.connect(sdsn, autocommit=True) as s:
            assert s.execute("SELECT count(*) FROM ev").fetchone() == (3,)
    finally:
        standby.cleanup()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the old primary was never touched
        assert conn.execute("SELECT count(*) FROM ev").fetchone() == (10,)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _statements(server: LocalServer, dbname: str, since: int) -> list[str]:
    """The worker's statements in the server log since ``since``, each with its continuation lines.
    Simple queries log as 'statement: ', parameterised ones as 'execute <name>: '."""
    with open(server.logfile, errors="replace") as f:
        f.seek(since)
        entries = re.split(r"\n(?=@)", f.read())
    return [e for e in entries if e.startswith(f"@{dbname}@pg-ttl worker@LOG:  ")
            and re.match(r"(statement|execute [^:]*): ", e.split("@LOG:  ", 1)[1])]


def _empty_ttl_tables(dsn: str, n: int, job_cron: str) -> None:
    """Tables t1..tn, empty, each with a 1-day TTL on created_at run on ``job_cron``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("""
            DO $$ BEGIN FOR i IN 1..{n} LOOP
                EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, created_at timestamptz NOT NULL)', i);
                PERFORM ttl.enable(format('t%s', i), expire_after => '1 day', column_name => 'created_at',
                                   job_cron => {cron});
            END LOOP; END $$""").format(n=sql.Literal(n), cron=sql.Literal(job_cron)))


@pytest.mark.slow
def test_first_pass_over_many_due_tables_reads_the_catalog_once(own_server: LocalServer) -> None:
    """Running 200 due tables in a row does not re-read the catalog after each one (the worker
    hears its own 'run' NOTIFY; only other sessions' notifications mean the catalog changed)."""
    dbname = "firstpass"
    dsn = _fresh_db(own_server, dbname)
    _empty_ttl_tables(dsn, 200, "@hourly")
    start_log = own_server.logfile.stat().st_size
    w = WorkerProcess("--dsn", dsn, "--once")
    try:
        assert w.proc.wait(timeout=120) == 0
        assert len(w.find("run finished")) == 200
    finally:
        w.close()
    ours = _statements(own_server, dbname, start_log)
    assert sum("ttl.worker_begin_run" in e for e in ours) == 200  # the log does show every statement
    catalog_reads = [e for e in ours if "ttl.worker_tables" in e]
    assert 1 <= len(catalog_reads) <= 3, len(catalog_reads)  # first load, and once more after LISTEN


@pytest.mark.slow
def test_idle_worker_with_1000_tables_is_cheap(own_server: LocalServer, tmp_path: Path) -> None:
    dbname = "idle"
    dsn = _fresh_db(own_server, dbname)
    _empty_ttl_tables(dsn, 1000, "0 0 1 1 *")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Every table already ran for this year's tick: nothing is due.
        tick = latest_tick("0 0 1 1 *", datetime.now(UTC))
        conn.execute("INSERT INTO ttl.worker_schedule (relid, due_at, started_at, finished_at, last_status) "
                     "SELECT relid, %s, now(), now(), 'ok' FROM ttl.policy", (tick,))
    for lag in ("off", "default"):
        cfg = tmp_path / f"{lag}.toml"
        cfg.write_text("[worker]\n" + ("lag_queries_per_second = 0\n" if lag == "off" else ""))
        w = WorkerProcess("--config", str(cfg), "--dsn", dsn)  # default intervals
        try:
            w.wait_for("policy picked up", count=1000, timeout=30)
            time.sleep(0.5)
            start_log = own_server.logfile.stat().st_size
            cpu0, t0 = _cpu_seconds(w.pid), time.monotonic()
            # the measurement window: a 15 s window holds at most two lag lookups at the default 0.1/s
            time.sleep(5.0 if lag == "off" else 15.0)
            elapsed = time.monotonic() - t0
            cpu = (_cpu_seconds(w.pid) - cpu0) / elapsed
            statements = _statements(own_server, dbname, start_log)
            per_second = len(statements) / elapsed
            print(f"\nidle worker, 1000 tables, lag lookups {lag}: {per_second:.2f} statements/s "
                  f"({len(statements)} in {elapsed:.1f}s), CPU {cpu * 100:.2f}% of a core")
            assert not w.find("run started")
            assert cpu < 0.03
            if lag == "off":
                assert statements == []  # nothing between polls (one per 30 s by default)
            else:
                # A lag lookup is 7 statements on one table; the default budget (0.1/s) keeps them below 1/s.
                assert 0 < per_second <= 1.0, statements
            assert w.stop() == 0
        finally:
            w.close()
