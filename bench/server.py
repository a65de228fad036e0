"""The bench's own throwaway server, database cloning and the machine description.

Every contender of a workload runs against a fresh copy of the same template
database (``CREATE DATABASE … STRATEGY FILE_COPY``), prewarmed into shared
buffers and after a CHECKPOINT, so each starts from the same data, the same
cache state and the same full-page-write state.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl import install
from pg_ttl.localserver import LocalServer

# Connections the bench opens for its own bookkeeping carry this name, so the
# transaction sampler never mistakes them for a contender.
ADMIN_APP = "bench-admin"
CONTENDER_APP = "bench-contender"
LOAD_APP = "bench-load"


def server_settings(shared_buffers_mb: int) -> dict[str, str]:
    """One set of settings for every contender (recorded in the results).

    Durability is relaxed (fsync off, as in the tests: a throwaway server on a
    temp disk) but full_page_writes is on, so WAL volumes are those a production
    server would write. Autovacuum is off so that dead tuples left behind and
    WAL are the contender's alone; checkpoints are pushed out of the way.
    """
    return {
        "shared_buffers": f"{shared_buffers_mb}MB",
        "full_page_writes": "on",
        "fsync": "off",
        "synchronous_commit": "on",
        "max_wal_size": "16GB",
        "min_wal_size": "1GB",
        "checkpoint_timeout": "1h",
        "autovacuum": "off",
        "track_commit_timestamp": "on",
        "shared_preload_libraries": "pg_stat_statements",
        "max_connections": "200",
        "max_locks_per_transaction": "256",
        "jit": "off",
        "log_min_messages": "warning",
    }


class BenchServer:
    """A LocalServer plus helpers to clone, prewarm and drop benchmark databases."""

    def __init__(self, shared_buffers_mb: int) -> None:
        self.settings = server_settings(shared_buffers_mb)
        self.local = LocalServer(settings=self.settings)

    def start(self) -> None:
        self.local.start()
        with self.admin() as conn:  # read by the idle-worker workload, from this database
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def cleanup(self) -> None:
        self.local.cleanup()

    def dsn(self, dbname: str = "postgres", app: str = ADMIN_APP) -> str:
        return psycopg.conninfo.make_conninfo(self.local.dsn(dbname), application_name=app)

    def admin(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def execute(self, dbname: str, statement: str | sql.Composable, params: Any = None) -> list[tuple[Any, ...]]:
        with self.admin(dbname) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]  # LiteralString or sql.SQL
            return cur.fetchall() if cur.description else []

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def clone(self, template: str, name: str) -> str:
        """A fresh copy of ``template`` named ``name`` (dropped first if present); returns its name."""
        self.drop_database(name)
        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(template)))
        return name

    def create_database(self, name: str) -> str:
        self.drop_database(name)
        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return name

    def install_pg_ttl(self, dbname: str) -> None:
        install.upgrade(self.local.dsn(dbname))

    def prepare_measurement(self, dbname: str) -> None:
        """Same starting line for every contender (``prewarm``)."""
        prewarm(self.dsn(dbname))

    @contextmanager
    def database(self, template: str, name: str) -> Iterator[str]:
        """Clone, yield the name, always drop afterwards."""
        self.clone(template, name)
        try:
            yield name
        finally:
            self.drop_database(name)

    def postmaster_pid(self) -> int:
        return int((self.local.datadir / "postmaster.pid").read_text().splitlines()[0])

    def effective_settings(self) -> dict[str, str]:
        names = sorted({*self.settings, "work_mem", "maintenance_work_mem", "wal_level", "max_worker_processes",
                        "max_parallel_workers_per_gather", "random_page_cost", "effective_cache_size"})
        rows = self.execute("postgres", "SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
                            [names])
        return {str(k): str(v) for k, v in rows}

    def version(self) -> str:
        return str(self.execute("postgres", "SELECT version()")[0][0])


def prewarm(dsn: str) -> None:
    """Same starting line for every contender: every relation of schema public in shared
    buffers, then a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm(c.oid) FROM pg_class c "
                     "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i', 't', 'm')")
        conn.execute("CHECKPOINT")


def touch_shared_buffers(server: LocalServer) -> None:
    """Every page of shared_buffers touched once, then given back empty: on this kind of
    virtual machine the first touch of a page of a fresh server's shared memory costs
    ~14 us (two faults an 8 kB buffer, measured), so a pass reading N new buffers paid
    ~28 us each while a sequential scan, in its small ring of buffers, paid almost
    nothing. A server that has run a while has them all touched; so has this one now
    (its buffers are freed by the DROP DATABASE and reused from there)."""
    name = "pg_ttl_bench_touch"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(server.dsn(name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_prewarm")
        # rows of ~1 kB (not compressed, not toasted), 10% more than shared_buffers holds
        conn.execute("CREATE TABLE w AS SELECT repeat('x', 1000) AS v FROM generate_series(1, "
                     "(pg_size_bytes(current_setting('shared_buffers')) * 1.1 / 1000)::int8)")
        conn.execute("SELECT pg_prewarm('w', 'buffer')")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def copy_database(server: LocalServer, template: str, name: str) -> str:
    """A fresh copy of database ``template`` named ``name`` (file by file: no WAL of its rows);
    its DSN."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
            sql.Identifier(name), sql.Identifier(template)))
    return server.dsn(name)


def statement_calls(conn: psycopg.Connection[Any], dbname: str) -> int:
    """Statements run in database ``dbname`` since pg_stat_statements was last reset (as counted by
    its ``track`` setting: top level, or nested too)."""
    row = conn.execute("SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d "
                       "ON d.oid = s.dbid WHERE d.datname = %s", (dbname,)).fetchone()
    assert row is not None
    return int(row[0])


def loadavg_text() -> str:
    """The load averages as /proc/loadavg prints them ('0.47 1.09 1.66')."""
    return " ".join(f"{x:.2f}" for x in loadavg())


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine_description(server: BenchServer) -> dict[str, Any]:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_mb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_mb = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model or platform.processor(),
        "memory_mb": mem_mb,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": server.version(),
        "postgres_bindir": str(server.local.bindir),
    }


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def git_dirty(root: Path) -> list[str]:
    """Tracked files that differ from the commit (the run measured the working tree)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


def process_cpu_seconds(pid: int, children: bool = False) -> float:
    """utime+stime of one process (plus its reaped children's, if asked) from /proc, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # fields[0] is the state (field 3); utime/stime are fields 14/15, cutime/cstime 16/17.
    total = int(fields[11]) + int(fields[12])
    if children:
        total += int(fields[13]) + int(fields[14])
    return total / tick


def server_cpu_seconds(postmaster_pid: int) -> float:
    """CPU of the whole cluster: postmaster + live children + children that already exited."""
    total = process_cpu_seconds(postmaster_pid, children=True)
    for child in child_pids(postmaster_pid):
        # A child that exits between listing and reading: its time is in cutime once reaped.
        with contextlib.suppress(OSError, IndexError):
            total += process_cpu_seconds(child)
    return total


def child_pids(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]
