"""The expiration engine: partition-wise, two-phase, resumable row expiry.

Public API (used by the CLI, the worker and the bench):

- ``expire(dsn, tables=None, *, stop=None, progress=None, worker=None)``: one pass.
- ``Engine(dsn)``: a session for many passes (``.expire(...)``, ``.close()``), as the worker keeps.
- ``plan(conn, table=None)``: dry run, per unit what would go; changes nothing.
- ``oldest_expired(conn, relid)``: expiry time of the oldest expired row still present.
"""

from pg_ttl.expire.context import ProgressListener, UnitContext
from pg_ttl.expire.engine import Engine, EngineError, expire
from pg_ttl.expire.plan import UnitPlan, oldest_expired, plan
from pg_ttl.expire.results import TableResult, UnitResult

__all__ = [
    "Engine",
    "EngineError",
    "ProgressListener",
    "TableResult",
    "UnitContext",
    "UnitPlan",
    "UnitResult",
    "expire",
    "oldest_expired",
    "plan",
]
