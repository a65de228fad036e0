"""deploy/'s Prometheus alert rules and Grafana dashboard: valid, and only about metrics a real worker exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.worker_proc import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus-alerts.yml"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
FAST = ("--poll-interval", "0.5", "--max-backoff", "1")
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
# The series names each "# TYPE name kind" line stands for (prometheus-client already names
# a counter's family "..._total" there, and its "..._created" has a TYPE line of its own).
SUFFIXES = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "untyped": ("",)}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _rule_exprs() -> list[str]:
    return [str(rule["expr"]) for rule in _rules()]


def _dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [str(t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [str(v.get("definition", "")) for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def _names(exprs: list[str]) -> set[str]:
    return {m for e in exprs for m in re.findall(r"\bpg_ttl_\w+", e)}


def test_alert_rules_follow_prometheus_rule_file_structure() -> None:
    """The rule-file schema Prometheus loads (groups -> rules), checked field by field."""
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}
    names: set[str] = set()
    for group in doc["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"} and group["name"] not in names
        names.add(group["name"])
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}, rule
            assert ("alert" in rule) != ("record" in rule), rule
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            if "for" in rule:
                assert DURATION.match(rule["for"]), rule["for"]
            for key in ("labels", "annotations"):
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in rule.get(key, {}).items())
            if "alert" in rule:
                assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
    alerts = {rule["alert"] for rule in _rules() if "alert" in rule}
    # The four conditions an operator asked for, by what they watch.
    assert {"PgTtlExpirationLagHigh", "PgTtlRunsFailing", "PgTtlWorkerLost", "PgTtlBacklogGrowing"} <= alerts


def test_promtool_accepts_rules_and_compose_config() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); the structure test still runs")
    for args in (["check", "rules", str(RULES)], ["check", "config", str(DEPLOY / "prometheus.yml")]):
        proc = subprocess.run([promtool, *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_is_grafana_json_with_unique_panels() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}


def test_compose_prometheus_service_is_optional_and_scrapes_the_worker() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    prom = services["prometheus"]
    assert prom["profiles"] == ["monitoring"]  # not started by a plain `docker compose up`
    for volume in prom["volumes"]:
        assert (ROOT / volume.split(":")[0]).is_file(), volume
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert config["rule_files"] == [RULES.name]
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    worker_port = services["worker"]["command"][services["worker"]["command"].index("--metrics-addr") + 1]
    assert targets == [f"worker:{worker_port.rsplit(':', 1)[1]}"]


def test_rules_and_dashboard_use_only_metrics_a_real_worker_exposes(dsn: str, connect: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO ev (created_at) SELECT now() - interval '3 days' FROM generate_series(1, 10)")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'created_at')")
    w = WorkerProcess("--dsn", dsn, "--metrics-addr", "127.0.0.1:0", *FAST)
    try:
        port = w.metrics_port
        w.wait_for("run finished", table="ev")
        # The lag is measured after the run, in the worker's next loop: wait for it (bounded).
        deadline = time.monotonic() + 20
        while True:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if "pg_ttl_expiration_lag_seconds{database=" in body or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        w.stop()
        w.close()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
    exposed = {name + suffix for name, kind in types.items() for suffix in SUFFIXES[kind]}
    assert "pg_ttl_rows_deleted_total" in exposed  # the parse above means something
    used = _names(_rule_exprs()) | _names(_dashboard_exprs())
    assert used and used <= exposed, sorted(used - exposed)
    # The series the alerts are built on are present after a run, with the labels they group by.
    for sample in ('pg_ttl_expiration_lag_seconds{database=', 'pg_ttl_next_run_timestamp_seconds{database=',
                   'pg_ttl_worker_info{', 'pg_ttl_database_up{database='):
        assert sample in body, sample
    # The throttle's pace as the run ended: full speed, nobody else at work.
    assert re.search(r'^pg_ttl_pace\{database="[^"]+"\} 1\.0$', body, re.M), body
    assert re.search(r'^pg_ttl_pace_reason\{database="[^"]+",reason="idle"\} 1\.0$', body, re.M)
    assert re.search(r'^pg_ttl_pace_reason\{database="[^"]+",reason="throttled"\} 0\.0$', body, re.M)
