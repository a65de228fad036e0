"""orphans: ranges of one child claimed by several workers, with their own history

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# An orphan pass over a table (a leaf partition, or the table) is a sweep of its
# block ranges of about range_bytes; workers claim ranges one by one (a session
# advisory lock per range: it vanishes with the worker), so several share one
# table and no range is done twice in a sweep. One row per range a run worked
# on: where it started (first_block: the range's start, or where an
# interrupted run left it), how far it got (next_block, committed with each
# DELETE: the checkpoint), and the rows it examined and deleted. A sweep is
# identified by the run that began it and covers the blocks the table had then
# (sweep_blocks) in ranges of range_blocks; it ends when each of its ranges has
# an 'ok' row.
UPGRADE = """
CREATE TABLE ttl.orphan_range (
    run_id        bigint NOT NULL REFERENCES ttl.run ON DELETE CASCADE,
    unit_relid    oid NOT NULL,
    sweep         bigint NOT NULL,
    sweep_blocks  bigint NOT NULL,
    range_blocks  bigint NOT NULL,
    range_no      integer NOT NULL,
    first_block   bigint NOT NULL,
    end_block     bigint NOT NULL,
    next_block    bigint NOT NULL,
    status        text NOT NULL DEFAULT 'running',
    rows_examined bigint NOT NULL DEFAULT 0,
    rows_deleted  bigint NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at   timestamptz,
    PRIMARY KEY (run_id, unit_relid, range_no),
    CONSTRAINT orphan_range_status CHECK (status IN ('running', 'ok', 'partial', 'timeout', 'failed',
                                                     'interrupted'))
) WITH (fillfactor = 50);
-- No index covers the counters, next_block or status: updated with every DELETE,
-- the row must stay a HOT update.
CREATE INDEX orphan_range_sweep ON ttl.orphan_range (unit_relid, sweep);

ALTER TABLE ttl.orphan_range ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.orphan_range FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.orphan_range FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM ttl.run r JOIN pg_catalog.pg_class c ON c.oid = r.relid
             WHERE r.run_id = orphan_range.run_id), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM ttl.run r JOIN pg_catalog.pg_class c ON c.oid = r.relid
             WHERE r.run_id = orphan_range.run_id), 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.orphan_range TO PUBLIC;
"""

DOWNGRADE = """
DROP TABLE ttl.orphan_range;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
