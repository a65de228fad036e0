"""Objects removed from the code layer (``sql/*.sql``), dropped before it is replayed.

Replaying the code layer creates or replaces what the package defines; it
cannot know what an older package defined and this one no longer does. Each
entry names such an object and the schema revision that was head when it
last existed: it is dropped from databases installed at that revision or
earlier (``IF EXISTS``: a database that never had it is left alone). A
database installed later never had the object, and a name reused later is not
dropped again.

Tables and their columns never appear here: they change through migrations.
The upgrade-from-the-previous-release test fails while an entry is missing
(the upgraded schema would keep an object a fresh install does not have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Removed:
    last_revision: str  # schema head revision of the last package that defined the object
    kind: Literal["function", "procedure", "view", "trigger", "event trigger"]
    name: str  # function/procedure: signature as in DROP FUNCTION ("ttl.f(regclass, text)");
    #            view: "ttl.v"; trigger: its name; event trigger: its name
    table: str | None = None  # trigger only: "ttl.policy"


REMOVED: tuple[Removed, ...] = (
    # The expiry predicate now comes from ttl._expiry_sql (one definition).
    Removed("0005", "function", "ttl._expired_sql(oid, timestamp with time zone)"),
    # Changes to users' tables are made by the SQL API (ttl._apply_change);
    # triggers on the catalog only validate.
    Removed("0006", "trigger", "a_row_ttl", table="ttl.policy"),
    Removed("0006", "trigger", "z_row_ttl_sync", table="ttl.policy"),
    Removed("0006", "trigger", "a_row_ttl", table="ttl.column_policy"),
    Removed("0006", "trigger", "z_row_ttl_sync", table="ttl.column_policy"),
    Removed("0006", "function", "ttl._policy_row_mode()"),
    Removed("0006", "function", "ttl._policy_after()"),
    Removed("0006", "function", "ttl._column_policy_mode()"),
    Removed("0006", "function", "ttl._column_policy_after()"),
    # Column nulling walks block ranges instead of rescanning from the start per batch.
    Removed("0007", "function",
            "ttl.null_expired_values(regclass, regclass, name, integer, timestamp with time zone)"),
    # The heartbeat also records the tables the worker skips.
    Removed("0009", "function", "ttl.worker_heartbeat(text, text, integer, text, text, integer)"),
    # An orphan policy may have several parent tables (parents).
    Removed("0013", "function",
            "ttl.enable_orphans(regclass, text[], regclass, text[], interval, name, text, text, bigint, integer)"),
    # Releasing a unit's claim is told whether it is shared (no lock table read per unit).
    Removed("0014", "function", "ttl._release_claim(oid)"),
    # A queue pass builds its drain, repair and recheck statements once per table
    # (ttl.queue_drain_sql(oid, timestamptz, ...)), not per shard.
    Removed("0015", "function", "ttl.queue_drain_sql(oid, integer, timestamp with time zone)"),
    Removed("0015", "function", "ttl.queue_repair_sql(oid, integer)"),
    Removed("0015", "function", "ttl.queue_recheck_sql(oid)"),
    # The heartbeat also records the worker's current pace (the adaptive throttle).
    Removed("0016", "function", "ttl.worker_heartbeat(text, text, integer, text, text, integer, jsonb)"),
)
