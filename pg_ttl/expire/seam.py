"""The engine as the worker sees it: a session that runs passes over some tables, and the
expiry of a table's oldest expired row. ``pg_ttl.expire.Engine`` and
``pg_ttl.expire.oldest_expired`` implement these; a test may pass anything that does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import psycopg
from psycopg.rows import TupleRow

from pg_ttl.expire.context import EngineSettings, ProgressListener
from pg_ttl.expire.results import TableResult
from pg_ttl.wakeup import StopRequest


class EngineSession(Protocol):
    """An engine session on one database, kept for many passes (``pg_ttl.expire.Engine``)."""

    def expire(self, tables: Sequence[str] | None = None, *, relids: Sequence[int] | None = None,
               stop: StopRequest | None = None, progress: ProgressListener | None = None,
               worker: str | None = None, cutoff: datetime | None = None,
               settings: EngineSettings | None = None) -> Sequence[TableResult]:
        """One pass over ``tables`` (names) or ``relids`` (None for both: every TTL table).

        ``stop`` set: finish the current batch and return. ``cutoff``: an instant at or before the
        server's clock (None: the server's now()); rows expired by then go. ``settings``: as the
        caller read them a moment ago (``ttl._pass_settings()``), with ``cutoff``; None: read here.
        Returns one result per table; raises only when the session is lost or the database
        cannot be served at all.
        """
        ...

    @property
    def broken(self) -> bool:
        """The session's connection is lost or closed: open another."""
        ...

    def check(self) -> None:
        """One round trip to the server: a session the server ended is ``broken`` after it."""
        ...

    def close(self) -> None: ...


class OpenEngine(Protocol):
    """Opens an engine session on the database at ``dsn``."""

    def __call__(self, dsn: str, /) -> EngineSession: ...


class OldestExpired(Protocol):
    """Expiry time of the oldest expired row still in table ``relid`` (None: nothing expired)."""

    def __call__(self, conn: psycopg.Connection[TupleRow], relid: int, /) -> datetime | None: ...


__all__ = ["EngineSession", "OldestExpired", "OpenEngine", "ProgressListener", "TableResult"]
