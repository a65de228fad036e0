"""What a table owner who is not a superuser can do from the CLI, and what a worker does with
tables it cannot act on (docs/worker.md, "Privileges")."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.helpers import ttl_table
from tests.test_worker_trust import _as, _count, _roles


def test_non_superuser_owner_uses_the_cli_on_their_table(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    db.autocommit = True
    with _roles(db, "app_owner"):
        db.execute("CREATE ROLE app_owner LOGIN NOSUPERUSER NOBYPASSRLS")
        db.execute("GRANT CREATE ON SCHEMA public TO app_owner")
        db.execute("SET ROLE app_owner")
        ttl_table(db, "owned_events", expired=12, live=3)
        db.execute("RESET ROLE")
        owner = _as(dsn, user="app_owner")
        for args in (["list"], ["describe", "owned_events"], ["plan", "owned_events"], ["status"]):
            res = cli(*args, "--dsn", owner)
            assert res.returncode == 0, (args, res.stdout, res.stderr)
            assert "owned_events" in res.stdout, (args, res.stdout)
        res = cli("run", "owned_events", "--dsn", owner, "--quiet")
        assert res.returncode == 0, res.stderr
        assert _count(db, "owned_events", expired_only=True) == 0 and _count(db, "owned_events") == 3
        assert db.execute("SELECT status, rows_deleted FROM ttl.run "
                          "WHERE relid = 'owned_events'::regclass").fetchall() == [("ok", 12)]
        # install is the one command that needs a superuser, and it says so.
        res = cli("install", "--dsn", owner)
        assert res.returncode != 0
        assert "superuser" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_worker_skips_tables_it_cannot_act_on_with_one_line_each(db: psycopg.Connection[Any], dsn: str,
                                                                  cli: Any) -> None:
    db.autocommit = True
    with _roles(db, "ttl_worker", "team_a", "team_b"):
        for role in ("team_a", "team_b"):
            db.execute(f"CREATE ROLE {role} NOLOGIN")
            db.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
        db.execute("CREATE ROLE ttl_worker LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT")
        db.execute("GRANT team_a TO ttl_worker")  # not team_b
        db.execute("SET ROLE team_a")
        ttl_table(db, "a_events", expired=10, live=2)
        db.execute("SET ROLE team_b")
        ttl_table(db, "b_events", expired=7, live=1)
        ttl_table(db, "b_more", expired=4, live=1)
        db.execute("RESET ROLE")

        worker = _as(dsn, user="ttl_worker")
        for _ in range(2):  # a second pass says it again, once per table, and still exits 0
            res = cli("worker", "--once", "--dsn", worker, "--name", "w1", "--log-format", "json")
            assert res.returncode == 0, res.stderr
            assert "Traceback" not in res.stderr, res.stderr
            events = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
            skipped = [e for e in events if e["msg"] == "table skipped"]
            assert sorted(e["table"] for e in skipped) == ["b_events", "b_more"], res.stderr
            assert all("team_b" in e["reason"] for e in skipped), skipped
            assert not [e for e in events if e.get("level") == "error"], res.stderr
        assert _count(db, "a_events", expired_only=True) == 0
        assert _count(db, "b_events", expired_only=True) == 7 and _count(db, "b_more", expired_only=True) == 4

        res = cli("status", "--dsn", dsn, "--json")
        assert res.returncode == 0, res.stderr
        tables = {t["table"]: t for t in json.loads(res.stdout)["tables"]}
        for name in ("b_events", "b_more"):
            assert [w["worker"] for w in tables[name]["skipped_by"]] == ["w1"], tables[name]
            assert "not a member of team_b" in tables[name]["skipped_by"][0]["reason"]
            assert tables[name]["next_run"] is not None  # still scheduled: another worker may run it
        assert tables["a_events"]["skipped_by"] == [] and tables["a_events"]["last_run"]["status"] == "ok"
        res = cli("status", "--dsn", dsn)
        assert res.returncode == 0, res.stderr
        assert "b_events: worker w1 skips it: role ttl_worker is not a member of team_b" in res.stdout, res.stdout

        # Once the worker's role may act as team_b, the next pass runs the tables and says so.
        db.execute("GRANT team_b TO ttl_worker")
        res = cli("worker", "--once", "--dsn", worker, "--name", "w1", "--log-format", "json")
        assert res.returncode == 0, res.stderr
        assert "table skipped" not in res.stderr
        assert _count(db, "b_events", expired_only=True) == 0 and _count(db, "b_more", expired_only=True) == 0
        res = cli("status", "--dsn", dsn, "--json")
        assert all(t["skipped_by"] == [] for t in json.loads(res.stdout)["tables"]), res.stdout
