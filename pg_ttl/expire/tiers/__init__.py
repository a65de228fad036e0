"""Tiers: rows that reached a storage tier are moved there before they expire
(sql/82_tiers.sql says which rows; pg_ttl.archive writes them).

A table with tiers gets an archive run before its deletion run: each leaf is
an ``archive`` unit (claimed, checkpointed by tier and block, resumable). A
unit sweeps the leaf in block ranges of about ``select_batch_size`` rows; for
each range, in one short transaction: the rows of the tier are locked (``FOR
UPDATE SKIP LOCKED``: the application is never waited on, and a locked row
cannot change until the transaction ends), written as Parquet objects (one
per day of the TTL column), each read back and verified (size, SHA-256, row
count), recorded in ``ttl.archive``, then deleted with the tier's condition
re-checked; the manifest rows commit with the DELETE. A crash at any point
leaves every row in the table or in exactly one listed object; objects of the
leaf that the manifest does not list are removed when the leaf is next
archived. The unit's history row counts the rows moved (rows_deleted), the
bytes and the objects written, in the same transaction.

With ``archive_before_delete`` (sql/82_tiers.sql: ttl.tier_sql) the last
storage tier also takes the rows already past the final DELETE; the archive
run comes before the deletion run of the same pass, at the same cutoff, so
the rows it can lock are archived before anything deletes them.

Whole partitions: a range partition on the TTL column whose upper bound shows
that every row in it reached storage tier *k* (ttl.partition_tier), a
directory or S3 storage, is one unit instead of its leaves. It is read in
short transactions (row ranges, no row lock), written to tier *k*'s storage as
batches are (one object per day of the TTL column, at most ``OBJECT_ROWS``
rows each, read back and verified) and nothing listed yet. Then, in one
transaction, the partition is locked against writers (``EXCLUSIVE ...
NOWAIT``: a row the application holds or a write under way refuses it at
once), checked to hold exactly the rows read (their count and the sum of
64-bit hashes of their values, read again under the lock), its objects
listed in ``ttl.archive``, the partition dropped or detached
(``ttl_partition_action``) and the unit's history row finished. A crash
before that commit leaves every row in the partition and the objects
unlisted (the next run removes them, as a batch's); after it, every row is
in exactly one listed object. A partition that cannot be locked, was written
to meanwhile or cannot be dropped now stays: its objects are removed and its
rows move batch by batch in that run, as any leaf's.

The modules: listing.py (the tables with tiers and the archive run's units), batches.py
(a leaf's rows range by range), exports.py (a partition whole), objects.py (what goes to
a storage: objects, manifest rows, what moved).
"""

from __future__ import annotations

from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.tiers.batches import archive_leaf
from pg_ttl.expire.tiers.exports import archive_partition
from pg_ttl.expire.tiers.listing import TIERS, archive_units, archives_before_delete
from pg_ttl.expire.tiers.objects import Moved, moved, object_prefix

__all__ = ["TIERS", "Moved", "archive", "archive_units", "archives_before_delete", "moved",
           "object_prefix"]


def archive(ctx: UnitContext) -> str:
    """Move the unit's rows that reached a storage tier; 'ok' or 'partial' (stopped, or
    rows the application held left behind when they are to be archived before the DELETE)."""
    if ctx.unit.tier is not None:
        return archive_partition(ctx)
    return archive_leaf(ctx, ctx.unit)
