"""pg-ttl status says what it knows: lost workers, and whether a backlog is a count or an estimate."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any


def _worker(conn: Any, name: str, state: str, age: str) -> None:
    conn.execute("INSERT INTO ttl.worker (name, host, pid, version, state, tables, heartbeat_at) "
                 "VALUES (%s, 'h', 1, 'x', %s, 1, now() - %s::interval)", (name, state, age))


def test_status_shows_workers_with_a_stale_heartbeat_as_lost(connect: Any, dsn: str, cli: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'created_at')")
    _worker(conn, "fresh", "running", "10 seconds")
    _worker(conn, "dead", "running", "10 minutes")
    _worker(conn, "stopped", "stopped", "10 minutes")
    _worker(conn, "in-a-long-run", "running", "10 minutes")
    # A run of "in-a-long-run" whose session is still connected: the worker is busy, not lost.
    busy = connect()
    busy.execute("INSERT INTO ttl.run (relid, table_name, cutoff, worker) VALUES ('ev'::regclass, 'ev', now(), %s)",
                 ("in-a-long-run",))
    res = cli("status", "--dsn", dsn, "--json", "--no-estimates")
    assert res.returncode == 0, res.stderr
    lost = {w["name"]: w["lost"] for w in json.loads(res.stdout)["workers"]}
    assert lost == {"fresh": False, "dead": True, "stopped": False, "in-a-long-run": False}
    text = cli("status", "--dsn", dsn, "--no-estimates")
    dead_line = next(line for line in text.stdout.splitlines() if "dead" in line)
    assert "lost (last said running)" in dead_line
    # The threshold is the operator's: with a longer one, nobody is lost.
    res = cli("status", "--dsn", dsn, "--json", "--no-estimates", "--lost-after", "3600")
    assert not any(w["lost"] for w in json.loads(res.stdout)["workers"])
    # Once the long run's session is gone, that worker is lost too.
    busy.close()
    res = cli("status", "--dsn", dsn, "--json", "--no-estimates")
    assert {w["name"] for w in json.loads(res.stdout)["workers"] if w["lost"]} == {"dead", "in-a-long-run"}


def test_status_says_whether_the_backlog_is_exact_or_estimated(connect: Any, dsn: str, cli: Any) -> None:
    conn = connect()
    for name, age in (("old", "3 days"), ("young", "1 hour")):
        conn.execute(f"CREATE TABLE {name} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute(f"INSERT INTO {name} (created_at) SELECT now() - %s::interval FROM generate_series(1, 500)",
                     (age,))
        conn.execute(f"SELECT ttl.enable('{name}', expire_after => '1 day', column_name => 'created_at')")
    res = cli("status", "--dsn", dsn, "--json")
    assert res.returncode == 0, res.stderr
    tables = {t["table"]: t for t in json.loads(res.stdout)["tables"]}
    # Nothing expired in "young": the index probe says so, the 0 is exact.
    assert (tables["young"]["backlog"], tables["young"]["backlog_exact"]) == (0, True)
    # "old" has expired rows: the number is the planner's, and says so.
    assert tables["old"]["backlog"] >= 1 and tables["old"]["backlog_exact"] is False
    text = cli("status", "--dsn", dsn).stdout
    old_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("old"))
    assert "(estimate)" in old_line
    young_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("young"))
    assert "estimate" not in young_line
    assert "the planner's estimate" in text


def test_status_counts_the_backlog_when_an_index_bounds_it(connect: Any, dsn: str, cli: Any) -> None:
    from pg_ttl.worker.status import EXACT_COUNT_LIMIT

    conn = connect()
    # Mostly live rows, as in a table that is expired regularly: the planner takes the index.
    for name, rows in (("small", 1281), ("big", EXACT_COUNT_LIMIT + 500)):
        conn.execute(f"CREATE TABLE {name} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute(f"CREATE INDEX ON {name} (created_at)")
        conn.execute(f"INSERT INTO {name} (created_at) SELECT now() - interval '3 days' "
                     "FROM generate_series(1, %s)", (rows,))
        conn.execute(f"INSERT INTO {name} (created_at) SELECT now() FROM generate_series(1, 40000)")
        conn.execute(f"SELECT ttl.enable('{name}', expire_after => '1 day', column_name => 'created_at')")
        conn.execute(f"ANALYZE {name}")
    # Rows the statistics do not know of yet are counted too.
    conn.execute("INSERT INTO small (created_at) SELECT now() - interval '3 days' FROM generate_series(1, 19)")
    res = cli("status", "--dsn", dsn, "--json")
    assert res.returncode == 0, res.stderr
    tables = {t["table"]: t for t in json.loads(res.stdout)["tables"]}
    assert (tables["small"]["backlog"], tables["small"]["backlog_exact"]) == (1300, True)
    # Beyond the limit the count stops and the number is an estimate again.
    assert tables["big"]["backlog_exact"] is False and tables["big"]["backlog"] > EXACT_COUNT_LIMIT
    text = cli("status", "--dsn", dsn).stdout
    small_line = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("small"))
    assert "1300" in small_line and "estimate" not in small_line


def test_a_manual_run_counts_as_the_latest_run_for_scheduling(connect: Any, dsn: str, cli: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO ev (created_at) SELECT now() - interval '3 days' FROM generate_series(1, 20)")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'created_at', "
                 "job_cron => '0 3 * * *')")
    before = json.loads(cli("status", "--dsn", dsn, "--json", "--no-estimates").stdout)["tables"][0]
    assert before["last_run"] is None
    now = conn.execute("SELECT now()").fetchone()[0]
    assert before["next_run"] <= (now.isoformat())  # never ran: due at once

    res = cli("run", "ev", "--dsn", dsn, "--quiet")
    assert res.returncode == 0, res.stderr
    after = json.loads(cli("status", "--dsn", dsn, "--json", "--no-estimates").stdout)["tables"][0]
    assert after["last_run"]["status"] == "ok" and after["last_run"]["rows_deleted"] == 20
    # The run covers today's 03:00 tick (or yesterday's, before 03:00): the next one is a day after it.
    nxt = datetime.fromisoformat(after["next_run"])
    assert nxt > now and (nxt.hour, nxt.minute) == (3, 0) and nxt - now <= timedelta(days=1), after

    # The worker agrees: nothing is due, so its pass runs nothing.
    conn.execute("INSERT INTO ev (created_at) SELECT now() - interval '3 days' FROM generate_series(1, 5)")
    res = cli("worker", "--once", "--dsn", dsn, "--name", "w-manual", "--allow-superuser", "--log-format", "json")
    assert res.returncode == 0, res.stderr
    assert conn.execute("SELECT count(*) FROM ttl.run WHERE worker = 'w-manual'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM ev").fetchone() == (5,)

    # A failed manual run does not count: the table stays due.
    conn.execute("INSERT INTO ttl.run (relid, table_name, cutoff, status, finished_at) "
                 "VALUES ('ev'::regclass, 'ev', now(), 'failed', now())")
    failed = json.loads(cli("status", "--dsn", dsn, "--json", "--no-estimates").stdout)["tables"][0]
    assert datetime.fromisoformat(failed["next_run"]) <= datetime.now(UTC)
