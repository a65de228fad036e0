"""pg-ttl status says what it knows: lost workers, and whether a backlog is a count or an estimate."""

from __future__ import annotations

import json
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
