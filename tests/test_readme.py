"""The README's quick start, taken literally from a fresh clone.

The first command (venv, install, ``pg-ttl demo``) runs as written in a fresh
``git clone`` of this repository. The second runs the whole test suite, so it
is not run again from inside it: its text must be exactly the commands
``.ci/run`` executes, which CI runs on every change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands(readme: str) -> list[str]:
    """The command lines of the first ``sh`` block under "## Quick start", comments stripped."""
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the Quick start section has no ```sh block"
    lines = [line.split(" #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def ci_test_commands() -> list[str]:
    """The pytest tier commands of .ci/run (the lines that run the whole suite)."""
    tier = re.compile(r'\.venv/bin/python -m pytest -m "?(not )?slow"?')
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if tier.fullmatch(line.strip())]


def test_quick_start_has_two_commands() -> None:
    commands = quick_start_commands((ROOT / "README.md").read_text())
    assert len(commands) == 2, commands


def test_quick_start_test_command_is_what_ci_runs() -> None:
    _, test_command = quick_start_commands((ROOT / "README.md").read_text())
    ci = ci_test_commands()
    assert len(ci) == 2, f".ci/run should run the fast and the slow tier, found {ci}"
    assert test_command == " && ".join(ci)


@pytest.mark.slow
def test_quick_start_first_command_runs_in_a_fresh_clone(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git is not None, "git is needed to clone the repository"
    clone = tmp_path / "clone"
    subprocess.run([git, "clone", "-q", str(ROOT), str(clone)], check=True)
    first, _ = quick_start_commands((clone / "README.md").read_text())
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", first], cwd=clone, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{first!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # The demo's own account of what it did: the pass deleted the expired rows, the server is gone.
    assert re.search(r"\d+ expired rows deleted", done.stdout), done.stdout[-3000:]
    assert "Throwaway server stopped and removed." in done.stdout
    assert (clone / ".venv" / "bin" / "pg-ttl").exists()
