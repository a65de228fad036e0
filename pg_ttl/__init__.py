"""pg_ttl: time-to-live for PostgreSQL."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pg-ttl")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
