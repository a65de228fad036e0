"""The built wheel (not only the checkout) carries the SQL and the migrations and can install pg_ttl."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_into_a_database(tmp_path: Path, plain_dsn: str) -> None:
    # Build from a copy: an in-tree build/ directory could leak stale files into the wheel.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "bench", "tests"))
    wheel_dir = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheel_dir), str(source)], check=True, capture_output=True)
    wheel = next(wheel_dir.glob("pg_ttl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    sql_files = sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    assert sorted(Path(n).name for n in names if n.startswith("pg_ttl/sql/") and n.endswith(".sql")) == sql_files
    assert "pg_ttl/migrations/env.py" in names
    versions = sorted(p.name for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    assert sorted(Path(n).name for n in names if n.startswith("pg_ttl/migrations/versions/0")) == versions
    assert any(n.endswith("entry_points.txt") for n in names)

    # A venv that sees the dependencies but gets pg_ttl only from the wheel, run outside the checkout.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True,
                   capture_output=True)
    where = subprocess.run([str(py), "-c", "import pg_ttl.install as i; print(i.sql_dir())"], check=True,
                           capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert str(env_dir) in where, where
    result = subprocess.run([str(env_dir / "bin" / "pg-ttl"), "install", "--dsn", plain_dsn],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(plain_dsn) as conn:
        row: Any = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'enable' "
                                "AND pronamespace = 'ttl'::regnamespace").fetchone()
        assert row == (1,)
