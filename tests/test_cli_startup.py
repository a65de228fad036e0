"""`pg-ttl --help` and `pg-ttl --version` start fast: the command line imports psycopg, rich,
the engine and importlib.metadata only when a command needs them (pg_ttl/cli/__init__.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

import pytest

# Each costs start-up time; none is needed to print help or the version.
HEAVY = ("psycopg", "rich.console", "rich.progress", "rich.table", "pg_ttl.expire", "pg_ttl.install",
         "pg_ttl.catalog", "pg_ttl.localserver", "pg_ttl.archive.storage", "pglast", "alembic")

CODE = """\
import json, sys
from pg_ttl.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = None
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def run_main(*argv: str) -> tuple[str, int, set[str]]:
    """stdout, exit code and the modules imported of ``pg-ttl ARGV`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", CODE, *argv], capture_output=True, text=True, check=True)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return proc.stdout, report["code"], set(report["modules"])


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("run", "--help"), ("demo", "--help"),
                                  ("orphans", "set", "--help")])
def test_help_and_version_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    out, code, modules = run_main(*argv)
    assert code == 0
    assert out.strip()
    assert sorted(m for m in HEAVY if m in modules) == []


def test_help_does_not_read_the_package_metadata() -> None:
    _, code, modules = run_main("--help")
    assert code == 0
    assert "importlib.metadata" not in modules


def test_version_is_the_installed_one() -> None:
    out, code, _ = run_main("--version")
    assert code == 0
    assert out == f"pg-ttl {version('pg-ttl')}\n"


def test_python_m_pg_ttl_help_imports_no_driver() -> None:
    """What a user runs (python -m pg_ttl), read from -X importtime."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pg_ttl", "--help"], capture_output=True,
                          text=True, check=True)
    assert proc.stdout.startswith("usage: pg-ttl")
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "pg_ttl.cli" in imported
    assert sorted(m for m in HEAVY if m in imported) == []
