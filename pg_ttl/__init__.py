"""pg_ttl: time-to-live for PostgreSQL."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pg_ttl.settings import TableDescription, Tier, TtlSettings, alter_table, describe_table

    __version__: str


def _version() -> str:
    # Read on first use (see __getattr__): importlib.metadata costs every command start-up time.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pg-ttl")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "0.0.0+unknown"


def rewrite(sql: str, filename: str = "<input>") -> str:
    """TTL DDL in ``sql`` rewritten to plain PostgreSQL (pure: no database); see pg_ttl.ddl.rewrite."""
    # Imported on use: pglast's parser costs every other command start-up time.
    from pg_ttl.ddl.rewrite import rewrite as _rewrite

    return _rewrite(sql, filename)


def __getattr__(name: str) -> object:
    if name == "__version__":
        value = globals()["__version__"] = _version()  # once: later reads find the global
        return value
    # The Python API (pg_ttl/settings.py), imported on use: psycopg costs start-up time.
    if name in ("TtlSettings", "Tier", "TableDescription", "alter_table", "describe_table"):
        from pg_ttl import settings

        return getattr(settings, name)
    raise AttributeError(f"module 'pg_ttl' has no attribute {name!r}")


__all__ = ["TableDescription", "Tier", "TtlSettings", "__version__", "alter_table", "describe_table", "rewrite"]
