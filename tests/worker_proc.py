"""A ``pg-ttl worker`` subprocess for the worker tests, with its JSON log lines at hand."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


class WorkerProcess:
    """``python -m pg_ttl worker ARGS --log-format json`` in the background.

    The tests' server has one role, a superuser, so the worker is told to accept it
    (``--allow-superuser``) unless ``allow_superuser=False``.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None, json_logs: bool = True,
                 allow_superuser: bool = True) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="pg-ttl-worker-", suffix=".log", delete=False)  # noqa: SIM115
        argv = [sys.executable, "-m", "pg_ttl", "worker", *args]
        if json_logs and "--log-format" not in args:
            argv += ["--log-format", "json"]
        if allow_superuser and "--allow-superuser" not in args:
            argv.append("--allow-superuser")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.pid = self.proc.pid

    def text(self) -> str:
        with open(self.log.name) as f:
            return f.read()

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):  # a line being written
                    out.append(json.loads(line))
        return out

    def find(self, msg: str, **fields: Any) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("msg") == msg and all(e.get(k) == v for k, v in fields.items())]

    def wait_for(self, msg: str, count: int = 1, timeout: float = 20.0, **fields: Any) -> list[dict[str, Any]]:
        def check() -> list[dict[str, Any]]:
            if self.proc.poll() is not None and len(self.find(msg, **fields)) < count:
                raise AssertionError(f"worker exited ({self.proc.returncode}) before {msg!r}:\n{self.text()}")
            found = self.find(msg, **fields)
            return found if len(found) >= count else []
        try:
            return wait_until(check, timeout, what=f"{msg!r} x{count} {fields}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{self.text()[-6000:]}") from None

    @property
    def metrics_port(self) -> int:
        start = self.wait_for("worker starting")[0]
        return int(start["metrics_port"])

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker did not stop within {timeout}s:\n{self.text()[-4000:]}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def scrape(port: int) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value}."""
    import urllib.request

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in body.splitlines():
        m = re.match(r"^(\S+?(?:\{.*\})?) (\S+)$", line)
        if m and not line.startswith("#"):
            samples[m.group(1)] = float(m.group(2))
    return samples
