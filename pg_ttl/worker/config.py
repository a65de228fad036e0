"""Worker configuration: a TOML file, environment variables and command-line flags.

Precedence for each setting: command-line flag, then environment variable,
then the config file, then the default. Databases: ``--dsn`` (repeatable) if
given, else the file's ``[[databases]]``, else ``$PGTTL_DSN``, else libpq's
own ``PG*`` variables (an empty DSN). TOML is read with the standard library
(``tomllib``), so the config adds no dependency.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import psycopg

from pg_ttl.worker.logs import FORMATS, parse_level

ENV_CONFIG = "PGTTL_WORKER_CONFIG"
ENV_DSN = "PGTTL_DSN"
# Only for tests and demos: shifts the scheduler's clock by this many seconds,
# so a cron tick can be made to fall a second away.
ENV_CLOCK_OFFSET = "PGTTL_WORKER_CLOCK_OFFSET"


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it and says what is accepted."""


@dataclass(frozen=True)
class DatabaseConfig:
    dsn: str
    name: str


@dataclass
class WorkerConfig:
    databases: list[DatabaseConfig] = field(default_factory=list)
    name: str = ""
    poll_interval: float = 30.0
    metrics_addr: str | None = None
    log_format: str = "kv"
    log_level: str = "info"
    min_backoff: float = 1.0
    max_backoff: float = 60.0
    shutdown_timeout: float = 30.0
    heartbeat_interval: float = 30.0
    lag_refresh_interval: float = 3600.0
    lag_queries_per_second: float = 0.1
    clock_offset: float = 0.0
    config_path: str | None = None

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        return parse_addr(self.metrics_addr) if self.metrics_addr else None


# Scalar settings: config-file key -> (environment variable, parser).
_FLOAT_KEYS = ("poll_interval", "min_backoff", "max_backoff", "shutdown_timeout", "heartbeat_interval",
               "lag_refresh_interval", "lag_queries_per_second")
_ENV = {
    "name": "PGTTL_WORKER_NAME",
    "poll_interval": "PGTTL_POLL_INTERVAL",
    "metrics_addr": "PGTTL_METRICS_ADDR",
    "log_format": "PGTTL_LOG_FORMAT",
    "log_level": "PGTTL_LOG_LEVEL",
    "max_backoff": "PGTTL_MAX_BACKOFF",
    "shutdown_timeout": "PGTTL_SHUTDOWN_TIMEOUT",
}
_KNOWN_TOP = {"worker", "databases"}


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"metrics_addr must be host:port (e.g. 127.0.0.1:9187), not {addr!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _float(key: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number of seconds, not {value!r}") from None
    if number <= 0 and key != "lag_refresh_interval" and key != "lag_queries_per_second":
        raise ConfigError(f"{key} must be > 0, not {value!r}")
    if number < 0:
        raise ConfigError(f"{key} must be >= 0 (0 turns it off), not {value!r}")
    return number


def _check(cfg: WorkerConfig) -> None:
    if cfg.log_format not in FORMATS:
        raise ConfigError(f"log_format must be one of {', '.join(FORMATS)}, not {cfg.log_format!r}")
    try:
        parse_level(cfg.log_level)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.metrics_addr:
        parse_addr(cfg.metrics_addr)
    if cfg.min_backoff > cfg.max_backoff:
        raise ConfigError(f"min_backoff ({cfg.min_backoff}) must not exceed max_backoff ({cfg.max_backoff})")
    for db in cfg.databases:
        try:
            psycopg.conninfo.conninfo_to_dict(db.dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"invalid DSN of database {db.name!r}: {str(exc).strip().splitlines()[0]}") from None
    names = [db.name for db in cfg.databases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"database names must be unique; repeated: {', '.join(dupes)}")


def database_name(dsn: str, environ: Mapping[str, str]) -> str:
    """A short label for logs and metrics: the database name in the DSN (host-qualified when remote)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "default"
    db = str(params.get("dbname") or environ.get("PGDATABASE") or params.get("user") or environ.get("PGUSER")
             or "default")
    return db


def _databases_from_file(raw: Any, environ: Mapping[str, str]) -> list[DatabaseConfig]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("[[databases]] must be a list of tables with a dsn (and an optional name)")
    out = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("dsn"), str):
            raise ConfigError(f"databases entry {i} needs dsn = \"postgresql://...\"")
        unknown = set(entry) - {"dsn", "name"}
        if unknown:
            raise ConfigError(f"databases entry {i}: unknown key(s) {', '.join(sorted(unknown))} (allowed: dsn, name)")
        out.append(DatabaseConfig(entry["dsn"], str(entry.get("name") or database_name(entry["dsn"], environ))))
    return out


def read_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - _KNOWN_TOP
    if unknown:
        raise ConfigError(f"config file {path}: unknown section(s) {', '.join(sorted(unknown))} "
                          f"(allowed: [worker], [[databases]])")
    worker = data.get("worker", {})
    if not isinstance(worker, dict):
        raise ConfigError(f"config file {path}: [worker] must be a table")
    allowed = {f.name for f in fields(WorkerConfig)} - {"databases", "config_path", "clock_offset"}
    bad = set(worker) - allowed
    if bad:
        raise ConfigError(f"config file {path}: unknown [worker] key(s) {', '.join(sorted(bad))} "
                          f"(allowed: {', '.join(sorted(allowed))})")
    return data


def load(cli: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> WorkerConfig:
    """Build the configuration. ``cli`` holds flag values (None = not given), ``dsns`` a list."""
    cli = dict(cli or {})
    env = os.environ if environ is None else environ
    path = cli.get("config") or env.get(ENV_CONFIG) or None
    data = read_file(path) if path else {}
    file_worker: dict[str, Any] = data.get("worker", {})

    cfg = WorkerConfig(config_path=path)
    for key in ("name", *_FLOAT_KEYS, "metrics_addr", "log_format", "log_level"):
        value = cli.get(key)
        if value is None and key in _ENV:
            value = env.get(_ENV[key]) or None
        if value is None:
            value = file_worker.get(key)
        if value is None:
            continue
        setattr(cfg, key, _float(key, value) if key in _FLOAT_KEYS else str(value))

    dsns = cli.get("dsns") or []
    if dsns:
        cfg.databases = [DatabaseConfig(d, database_name(d, env)) for d in dsns]
        # The same database name twice on different hosts: tell them apart.
        if len({d.name for d in cfg.databases}) < len(cfg.databases):
            cfg.databases = [DatabaseConfig(d.dsn, f"{d.name}#{i}") for i, d in enumerate(cfg.databases, 1)]
    else:
        cfg.databases = _databases_from_file(data.get("databases"), env)
    if not cfg.databases:
        dsn = env.get(ENV_DSN, "")
        cfg.databases = [DatabaseConfig(dsn, database_name(dsn, env))]
    if not cfg.name:
        cfg.name = f"{socket.gethostname()}:{os.getpid()}"
    offset = env.get(ENV_CLOCK_OFFSET)
    if offset:
        try:
            cfg.clock_offset = float(offset)
        except ValueError:
            raise ConfigError(f"{ENV_CLOCK_OFFSET} must be a number of seconds, not {offset!r}") from None
    _check(cfg)
    return cfg


def redact(dsn: str) -> str:
    """The DSN without its password, for logs."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<invalid dsn>"
    if "password" in params:
        params["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
