"""Record a released schema as a SQL fixture for the upgrade test.

Usage (from the repository root, once per release worth testing):

    python tests/upgrade/make_release_fixture.py 7c463a5 tests/upgrade/release_0004.sql

It extracts the release with ``git archive``, installs it with that release's
own code into a scratch database on a throwaway server, and writes
``pg_dump --schema=ttl --inserts`` of the result, plus what a schema dump
leaves out: pg_ttl's event triggers. The test then never needs git history.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import psycopg

from pg_ttl.localserver import LocalServer

ROOT = Path(__file__).resolve().parents[2]


def extract_release(commit: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "pg_ttl", "sql", "migrations"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    # The wheel maps sql/ and migrations/ to pg_ttl.sql / pg_ttl.migrations; mirror that on the path.
    (into / "pg_ttl" / "sql").symlink_to(into / "sql")
    (into / "pg_ttl" / "migrations").symlink_to(into / "migrations")


def event_triggers_sql(dsn: str) -> str:
    """CREATE EVENT TRIGGER statements for pg_ttl's event triggers (not in a schema dump)."""
    lines = []
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """SELECT evtname, evtevent, p.oid::regproc::text, evttags
                 FROM pg_catalog.pg_event_trigger e JOIN pg_catalog.pg_proc p ON p.oid = e.evtfoid
                WHERE p.pronamespace = 'ttl'::regnamespace ORDER BY evtname""").fetchall()
        for name, event, func, tags in rows:
            stmt = psycopg.sql.SQL("CREATE EVENT TRIGGER {} ON {}").format(
                psycopg.sql.Identifier(name), psycopg.sql.Identifier(event))
            if tags:
                stmt += psycopg.sql.SQL(" WHEN TAG IN ({})").format(
                    psycopg.sql.SQL(", ").join(psycopg.sql.Literal(t) for t in tags))
            stmt += psycopg.sql.SQL(" EXECUTE FUNCTION {}()").format(psycopg.sql.SQL(func))
            lines.append(stmt.as_string(conn) + ";")
    return "\n".join(lines) + "\n"


def main(commit: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp, LocalServer() as server:
        release = Path(tmp) / "release"
        release.mkdir()
        extract_release(commit, release)
        dsn = server.create_database("release")
        # In the release's directory and with -S (no site hooks), neither the working tree nor an
        # editable install of it can shadow the release;
        # its dependencies come from this interpreter's site-packages, put on the path by hand.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(release), *site.getsitepackages()])}
        code = ("import sys, pg_ttl, pg_ttl.install as i; assert pg_ttl.__file__.startswith(sys.argv[2]); "
                "print(i.upgrade(sys.argv[1]).after)")
        rev = subprocess.run([sys.executable, "-S", "-c", code, dsn, str(release)], env=env, cwd=release, check=True,
                             stdout=subprocess.PIPE, text=True).stdout.strip()
        pg_dump = server.bindir / "pg_dump"
        dump = subprocess.run([str(pg_dump), "--schema=ttl", "--inserts", "--no-owner", "-d", dsn],
                              check=True, capture_output=True, text=True).stdout
        # psql meta-commands (\restrict in recent minor releases) cannot run through a driver.
        dump = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
        header = (f"-- pg_ttl schema as installed by release {commit} (schema revision {rev}).\n"
                  f"-- Produced by: python tests/upgrade/make_release_fixture.py {commit} tests/upgrade/{out.name}\n"
                  "-- (pg_dump --schema=ttl --inserts --no-owner, plus the event triggers a schema dump omits).\n"
                  "-- Loaded by tests/test_upgrade.py into a fresh database, then upgraded to head.\n\n")
        out.write_text(header + dump + "\n\n-- Event triggers\n" + event_triggers_sql(dsn))
        print(f"wrote {out}: release {commit}, revision {rev}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
