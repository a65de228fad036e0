"""pg_ttl: time-to-live for PostgreSQL."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pg-ttl")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0+unknown"

from pg_ttl.ddl.rewrite import rewrite

__all__ = ["__version__", "rewrite"]
