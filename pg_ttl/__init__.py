"""pg_ttl: time-to-live for PostgreSQL."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pg-ttl")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0+unknown"


def rewrite(sql: str, filename: str = "<input>") -> str:
    """TTL DDL in ``sql`` rewritten to plain PostgreSQL (pure: no database); see pg_ttl.ddl.rewrite."""
    # Imported on use: pglast's parser costs every other command start-up time.
    from pg_ttl.ddl.rewrite import rewrite as _rewrite

    return _rewrite(sql, filename)


__all__ = ["__version__", "rewrite"]
