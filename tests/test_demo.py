"""`pg-ttl demo`: the embedded default, on a throwaway server that is removed afterwards."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest


def _our_servers() -> set[str]:
    return set(glob.glob("/tmp/pg_ttl-*"))


def _data_dir(out: str) -> str:
    """The demo's own server directory, as it printed it (other sessions may run servers too)."""
    found = re.search(r"data in (/tmp/pg_ttl-[^\s)]+)", out)
    assert found, out
    return found.group(1)


def test_demo_runs_and_cleans_up(cli: Any) -> None:
    before = _our_servers()
    result = cli("demo", "--rows", "600", timeout=180)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "installed" in out or "schema ttl at revision" in out
    assert "ttl.enable('events'" in out
    assert "expired" in out and "live" in out
    # one pass deleted exactly the expired half (rows are spread over 60 days, TTL 30 days)
    assert "events: delete" in out and "300 expired rows deleted" in out and "status ok" in out
    after = out.split("events by expiry state, after")[1].split("run history")[0]
    assert "│ expired" not in after and re.search(r"│ live\s+│\s+300 │", after)
    assert "status ok, 300 rows deleted" in out
    assert "removed" in out
    assert not os.path.exists(_data_dir(out)) and _data_dir(out) not in before


@pytest.mark.slow
def test_demo_cleans_up_on_interrupt() -> None:
    before = _our_servers()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "demo", "--rows", "2000000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _our_servers() == before:
        time.sleep(0.1)
    time.sleep(2)  # the server is up, the long insert is running
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert "removed" in out
    assert not os.path.exists(_data_dir(out))
