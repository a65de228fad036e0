"""The engine as its callers see it (the worker, the bench): one pass over some tables, and
the expiry of a table's oldest expired row. ``pg_ttl.expire.expire`` and
``pg_ttl.expire.oldest_expired`` implement these; a test may pass any function that does."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import psycopg
from psycopg.rows import TupleRow

from pg_ttl.expire.context import ProgressListener
from pg_ttl.expire.results import TableResult


class Expirer(Protocol):
    """One pass over ``tables`` (None: every TTL table) of the database at ``dsn``.

    ``stop`` set: finish the current batch and return. ``cutoff``: an instant at or before the
    server's clock (None: the server's now()); rows expired by then go. Returns one result per
    table; raises only when the session is lost or the database cannot be served at all.
    """

    def __call__(self, dsn: str, tables: Sequence[str] | None, /, *, stop: threading.Event | None,
                 progress: ProgressListener | None, worker: str | None,
                 cutoff: datetime | None) -> Sequence[TableResult]: ...


class OldestExpired(Protocol):
    """Expiry time of the oldest expired row still in table ``relid`` (None: nothing expired)."""

    def __call__(self, conn: psycopg.Connection[TupleRow], relid: int, /) -> datetime | None: ...


__all__ = ["Expirer", "OldestExpired", "ProgressListener", "TableResult"]
