"""The built wheel (not only the checkout) carries the SQL and the migrations and can install pg_ttl."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_installs_into_a_database(tmp_path: Path, plain_dsn: str) -> None:
    # Build from a copy: an in-tree build/ directory could leak stale files into the wheel.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "bench", "tests"))
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

    # A fresh venv (``python -m venv``, with its own pip) that gets pg_ttl only from the wheel, run outside the
    # checkout. The dependencies come from the running interpreter's site-packages, listed in a .pth file: plain
    # paths, so the .pth files in there (the checkout's editable install) are not processed.
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, capture_output=True)
    py = env_dir / "bin" / "python"
    env_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    paths = sysconfig.get_paths()
    outer = dict.fromkeys([*site.getsitepackages(), paths["purelib"], paths["platlib"]])
    (env_site / "_outer_deps.pth").write_text("".join(f"{d}\n" for d in outer if Path(d).is_dir()))
    proc = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([str(py), "-c", "import sys, pg_ttl.install as i; print(sys.prefix, i.sql_dir())"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    prefix, where = proc.stdout.split()
    assert Path(prefix).resolve() == env_dir.resolve() and where.startswith(str(env_site)), proc.stdout
    result = subprocess.run([str(env_dir / "bin" / "pg-ttl"), "install", "--dsn", plain_dsn],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(plain_dsn) as conn:
        row: Any = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'enable' "
                                "AND pronamespace = 'ttl'::regnamespace").fetchone()
        assert row == (1,)
