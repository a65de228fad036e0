"""A throwaway local PostgreSQL server: for `pg-ttl demo`, the tests and the bench.

PostgreSQL refuses to run as root, so when we are root the cluster is
initialised and started as an unprivileged user (default ``postgres``) through
``runuser``. Binaries come from the system (PATH, ``pg_config --bindir``,
Debian's ``/usr/lib/postgresql/N/bin``) or, as a fallback, the ``pgserver``
wheel, which ships its own.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg


class LocalServerError(RuntimeError):
    """The throwaway server could not be found, created or started."""


def _bindir_has_server(path: str | Path) -> bool:
    p = Path(path)
    return (p / "initdb").is_file() and (p / "pg_ctl").is_file() and (p / "postgres").is_file()


def candidate_bindirs() -> list[Path]:
    """Every directory that holds a usable initdb/pg_ctl/postgres, best first."""
    found: list[Path] = []
    explicit = os.environ.get("PGTTL_PG_BINDIR")
    if explicit:
        found.append(Path(explicit))
    initdb = shutil.which("initdb")
    if initdb:
        found.append(Path(os.path.realpath(initdb)).parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
            found.append(Path(out.stdout.strip()))
        except (OSError, subprocess.CalledProcessError):
            pass
    # Debian/Ubuntu keep server binaries out of PATH, one directory per major version.
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major_from_path, reverse=True)
    found.extend(Path(d) for d in debian)
    if not any(_bindir_has_server(p) for p in found):
        found.extend(pgserver_bindirs())
    unique: list[Path] = []
    for p in found:
        if _bindir_has_server(p) and p not in unique:
            unique.append(p)
    return unique


def pgserver_bindirs() -> list[Path]:
    """The binaries inside the pgserver wheel, without importing it (its import is slow and noisy)."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(loc) / "pginstall" / "bin" for loc in spec.submodule_search_locations]


def _major_from_path(path: str) -> int:
    try:
        return int(Path(path).parent.name)
    except ValueError:
        return 0


def find_bindir() -> Path:
    dirs = candidate_bindirs()
    if not dirs:
        raise LocalServerError(
            "no PostgreSQL server binaries found (looked in $PGTTL_PG_BINDIR, PATH, "
            "pg_config --bindir, /usr/lib/postgresql/*/bin and the pgserver wheel); "
            "install postgresql (e.g. apt-get install postgresql-15) or `pip install pgserver`"
        )
    return dirs[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer:
    """One PostgreSQL cluster in a temporary directory, listening on 127.0.0.1."""

    bindir: Path = field(default_factory=find_bindir)
    port: int = field(default_factory=free_port)
    run_as: str | None = None  # unprivileged OS user; chosen automatically when root
    settings: dict[str, str] = field(default_factory=dict)
    base_dir: Path | None = None
    superuser: str = "postgres"

    def __post_init__(self) -> None:
        if self.run_as is None and os.geteuid() == 0:
            self.run_as = os.environ.get("PGTTL_PG_OS_USER", "postgres")
        self._owns_dir = self.base_dir is None
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="pg_ttl-"))
        self.datadir = self.base_dir / "data"
        self.sockdir = self.base_dir / "sock"
        self.logfile = self.base_dir / "server.log"

    # -- process helpers ---------------------------------------------------
    def _cmd(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def _run(self, *args: str) -> None:
        proc = subprocess.run(self._cmd(*args), capture_output=True, text=True)
        if proc.returncode != 0:
            raise LocalServerError(f"{' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")

    def _chown(self, path: Path) -> None:
        if self.run_as:
            pw = pwd.getpwnam(self.run_as)
            os.chown(path, pw.pw_uid, pw.pw_gid)

    @property
    def version(self) -> str:
        out = subprocess.run([str(self.bindir / "postgres"), "--version"], capture_output=True, text=True)
        return out.stdout.strip()

    # -- lifecycle ------------------------------------------------------------
    def _make_binaries_reachable(self) -> None:
        """Copy the installation when the unprivileged user cannot reach it (e.g. pgserver under /root)."""
        assert self.base_dir is not None and self.run_as
        probe = subprocess.run(["runuser", "-u", self.run_as, "--", str(self.bindir / "postgres"), "--version"],
                               capture_output=True)
        if probe.returncode == 0:
            return
        # Keep the layout two levels up, so relative rpaths (pgserver's
        # $ORIGIN/../../../pgserver.libs) still resolve in the copy.
        install_dir = self.bindir.parent
        package_dir = install_dir.parent
        root = self.base_dir / "pgcopy"
        shutil.copytree(install_dir, root / package_dir.name / install_dir.name, symlinks=True)
        for libs in package_dir.parent.glob(f"{package_dir.name}*.libs"):
            shutil.copytree(libs, root / libs.name, symlinks=True)
        self.bindir = root / package_dir.name / install_dir.name / self.bindir.name

    def init(self) -> None:
        assert self.base_dir is not None
        if self.run_as:
            try:
                pwd.getpwnam(self.run_as)
            except KeyError as exc:
                raise LocalServerError(
                    f"running as root needs an unprivileged OS user {self.run_as!r} to own the server "
                    "(create it, e.g. useradd --system postgres, or set PGTTL_PG_OS_USER to another user)"
                ) from exc
        self.base_dir.chmod(0o755)
        self._chown(self.base_dir)
        self.sockdir.mkdir(exist_ok=True)
        self._chown(self.sockdir)
        if self.run_as:
            self._make_binaries_reachable()
        self._run(
            str(self.bindir / "initdb"),
            "-D", str(self.datadir),
            "-U", self.superuser,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self) -> None:
        if not self.datadir.exists():
            self.init()
        opts = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockdir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **self.settings,
        }
        o = " ".join(f"-c {k}={v}" for k, v in opts.items())
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
            "-o", o, "-w", "-t", "60", "start",
        )

    def stop(self, mode: str = "fast") -> None:
        if (self.datadir / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill9(self) -> None:
        """Crash the postmaster (simulates a server crash)."""
        pid_file = self.datadir / "postmaster.pid"
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)

    def cleanup(self) -> None:
        with contextlib.suppress(LocalServerError):
            self.stop("immediate")
        if self._owns_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- connecting ------------------------------------------------------------
    def dsn(self, dbname: str = "postgres", user: str | None = None) -> str:
        return psycopg.conninfo.make_conninfo(
            host="127.0.0.1", port=self.port, user=user or self.superuser, dbname=dbname
        )

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        return self.dsn(name)
