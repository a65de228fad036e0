"""Worker configuration: a TOML file, environment variables and command-line flags.

Precedence for each setting: command-line flag, then environment variable,
then the config file, then the default. Databases: ``--dsn`` (repeatable) if
given, else the file's ``[[databases]]``, else ``$PGTTL_DSN``, else libpq's
own ``PG*`` variables (an empty DSN). TOML is read with the standard library
(``tomllib``), so the config adds no dependency.
"""

from __future__ import annotations

import math
import os
import re
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

    @property
    def connect_dsn(self) -> str:
        """The DSN the worker connects with: ``dsn`` plus TCP keepalives and a user timeout
        where it sets none. A server that vanishes without closing the connection (host
        down, network cut) would otherwise leave a loop blocked in a read for as long as
        the kernel retries (15 minutes or more), its thread alive, so that systemd's
        watchdog never fires; with these the connection fails within about two minutes and
        the loop reconnects. (libpq ignores them on Unix-domain sockets.)"""
        given = psycopg.conninfo.conninfo_to_dict(self.dsn)
        extra = {k: v for k, v in NETWORK_DEFAULTS.items() if k not in given}
        return psycopg.conninfo.make_conninfo(self.dsn, **extra) if extra else self.dsn


# libpq connection options; see DatabaseConfig.connect_dsn.
NETWORK_DEFAULTS = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10",
                    "keepalives_count": "6", "tcp_user_timeout": "120000"}


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
    allow_superuser: bool = False
    config_path: str | None = None

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        return parse_addr(self.metrics_addr) if self.metrics_addr else None


# Longest accepted wait, in seconds (one year): far beyond any useful setting,
# and well inside what select() and thread waits take without overflowing.
MAX_SECONDS = 365 * 86400

# Numeric settings: key -> (0 allowed because it turns the feature off, what the number counts).
NUMBERS: dict[str, tuple[bool, str]] = {
    "poll_interval": (False, "seconds"),
    "min_backoff": (False, "seconds"),
    "max_backoff": (False, "seconds"),
    "shutdown_timeout": (False, "seconds"),
    "heartbeat_interval": (False, "seconds"),
    "lag_refresh_interval": (True, "seconds"),
    "lag_queries_per_second": (True, "lookups per second"),
}
_STRINGS = ("name", "metrics_addr", "log_format", "log_level")
_BOOLS = ("allow_superuser",)
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


def accepted(key: str) -> str:
    """What a numeric setting accepts, in words (error messages and docs/worker.md say the same)."""
    zero_off, unit = NUMBERS[key]
    if unit == "seconds":
        low = "from 0 (off)" if zero_off else "greater than 0"
        return f"a number of seconds {low} up to {MAX_SECONDS}"
    return f"a number of {unit}, 0 (off) or more" if zero_off else f"a number of {unit} greater than 0"


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6]:port``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"metrics_addr must be host:port (e.g. 127.0.0.1:9187), not {addr!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


# TOML's names for what a value is, for "must be a number, not a string".
_TOML_KINDS = {bool: "a boolean", str: "a string", list: "an array", dict: "a table"}


def _show(value: Any) -> str:
    """A value as the user wrote it: TOML spells booleans true/false."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def _number(key: str, value: Any, where: str, typed: bool) -> float:
    """``value`` as the number ``key`` accepts. ``typed``: it comes from TOML, where a number is written
    without quotes, so a string or a boolean is a mistake, not a number to convert."""
    if isinstance(value, bool) or (typed and not isinstance(value, int | float)):
        kind = _TOML_KINDS.get(type(value), type(value).__name__)
        raise ConfigError(f"{where} must be {accepted(key)} (a number without quotes), not {kind}: {_show(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where} must be {accepted(key)}, not {_show(value)}") from None
    zero_off, unit = NUMBERS[key]
    too_big = unit == "seconds" and number > MAX_SECONDS
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_off) or too_big:
        raise ConfigError(f"{where} must be {accepted(key)}, not {_show(value)}")
    return number


def _string(key: str, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string (in quotes), not {_show(value)}")
    return value


def _bool(key: str, value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false (without quotes), not {_show(value)}")
    return value


def _check_string(key: str, value: str, where: str) -> None:
    """The string settings whose values are a closed set or have a shape."""
    if key == "log_format" and value not in FORMATS:
        raise ConfigError(f"{where} must be one of {', '.join(FORMATS)}, not {value!r}")
    if key == "log_level":
        try:
            parse_level(value)
        except ValueError:
            raise ConfigError(f"{where} must be debug, info, warning or error, not {value!r}") from None
    if key == "metrics_addr" and value:
        try:
            parse_addr(value)
        except ConfigError:
            raise ConfigError(f"{where} must be host:port (e.g. 127.0.0.1:9187), not {value!r}") from None


def _check(cfg: WorkerConfig) -> None:
    if cfg.min_backoff > cfg.max_backoff:
        where = f"config file {cfg.config_path}: " if cfg.config_path else ""
        raise ConfigError(f"{where}min_backoff ({cfg.min_backoff:g}) must not exceed max_backoff "
                          f"({cfg.max_backoff:g})")
    for db in cfg.databases:
        try:
            psycopg.conninfo.conninfo_to_dict(db.dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"invalid DSN of database {db.name!r}: {_dsn_error(exc)}") from None
    names = [db.name for db in cfg.databases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"database names must be unique; repeated: {', '.join(dupes)}")


def _dsn_error(exc: Exception) -> str:
    """libpq's reason a DSN does not parse, without the parts of the DSN it quotes
    (e.g. 'missing "=" after "s3cret"'): they may hold the password, and this
    message goes to logs. Only an unknown option's name is kept."""
    text = str(exc).strip().splitlines()[0]
    if text.startswith(("invalid connection option ", "invalid URI query parameter")):
        return text
    return re.sub(r'"[^"]*"', lambda m: m.group(0) if m.group(0) in ('"="', '"]"') else '"..."', text)


def database_name(dsn: str, environ: Mapping[str, str]) -> str:
    """A short label for logs and metrics: the database name in the DSN (host-qualified when remote)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "default"
    db = str(params.get("dbname") or environ.get("PGDATABASE") or params.get("user") or environ.get("PGUSER")
             or "default")
    return db


def _databases_from_file(raw: Any, environ: Mapping[str, str], path: str) -> list[DatabaseConfig]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"config file {path}: [[databases]] must be a list of tables with a dsn "
                          "(and an optional name)")
    out = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("dsn"), str):
            raise ConfigError(f"config file {path}: databases entry {i} needs dsn = \"postgresql://...\"")
        unknown = set(entry) - {"dsn", "name"}
        if unknown:
            raise ConfigError(f"config file {path}: databases entry {i}: unknown key(s) "
                              f"{', '.join(sorted(unknown))} (allowed: dsn, name)")
        name = entry.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"config file {path}: databases entry {i}: name must be a non-empty string "
                              f"(in quotes), not {name!r}")
        out.append(DatabaseConfig(entry["dsn"], name or database_name(entry["dsn"], environ)))
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


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def load(cli: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> WorkerConfig:
    """Build the configuration. ``cli`` holds flag values (None = not given), ``dsns`` a list."""
    cli = dict(cli or {})
    env = os.environ if environ is None else environ
    path = cli.get("config") or env.get(ENV_CONFIG) or None
    data = read_file(path) if path else {}
    file_worker: dict[str, Any] = data.get("worker", {})

    cfg = WorkerConfig(config_path=path)
    for key in (*_STRINGS, *NUMBERS, *_BOOLS):
        # Where the value comes from names it in errors: the flag, the variable, or the file and key.
        typed = False
        if cli.get(key) is not None:
            value, where = cli[key], _flag(key)
        elif key in _ENV and env.get(_ENV[key]):
            value, where = env[_ENV[key]], _ENV[key]
        elif key in file_worker:
            value, where, typed = file_worker[key], f"config file {path}: [worker] {key}", True
        else:
            continue
        if key in NUMBERS:
            setattr(cfg, key, _number(key, value, where, typed))
        elif key in _BOOLS:
            setattr(cfg, key, _bool(key, value, where))
        else:
            setattr(cfg, key, _string(key, value, where))
            _check_string(key, getattr(cfg, key), where)

    dsns = cli.get("dsns") or []
    if dsns:
        cfg.databases = [DatabaseConfig(d, database_name(d, env)) for d in dsns]
        # The same database name twice on different hosts: tell them apart.
        if len({d.name for d in cfg.databases}) < len(cfg.databases):
            cfg.databases = [DatabaseConfig(d.dsn, f"{d.name}#{i}") for i, d in enumerate(cfg.databases, 1)]
    else:
        cfg.databases = _databases_from_file(data.get("databases"), env, str(path))
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
            cfg.clock_offset = math.nan
        if not math.isfinite(cfg.clock_offset):
            raise ConfigError(f"{ENV_CLOCK_OFFSET} must be a number of seconds, not {offset!r}")
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
