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
    # one pass deleted exactly the expired half (rows are spread over 60 days, TTL 30 days) and first
    # moved the rows 14 to 30 days old to the temporary directory (a 14-day tier)
    assert "events: delete" in out and "300 expired rows deleted" in out and "status ok" in out
    assert "events: archive" in out and "160 moved to storage local" in out
    assert re.search(r"160 rows in \d+ Parquet objects under /", out.replace("\n", " "))
    after = out.split("events by expiry state, after")[1].split("run history")[0]
    assert "│ expired" not in after and "│ past the tier" not in after and re.search(r"│ live\s+│\s+140 │", after)
    assert "status ok, 300 rows deleted" in out
    assert "removed" in out
    assert not os.path.exists(_data_dir(out)) and _data_dir(out) not in before


@pytest.mark.slow
def test_demo_cleans_up_on_interrupt() -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    # (SIGINT back to its default in the child: a test run started in the background by a shell
    # without job control inherits it ignored, and Python then never turns it into KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "demo", "--rows", "2000000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # until the server is up (however long it takes on a loaded machine)
        seen.append(line)
        if "pg-ttl install" in line:
            break
    time.sleep(1)  # the long insert is running
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    out = "".join(seen) + rest
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert "removed" in out
    assert not os.path.exists(_data_dir(out))
