"""several workers share one big table's row expiry, range by range

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from pg_ttl.install import execute_sql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# The block ranges orphan passes claim one by one (0013) serve row expiry too: a table
# (or leaf partition) of at least two ranges of row_range_bytes, swept in ctid order, is
# swept by every run that comes while it lasts, each range by one of them. The ranges'
# table is named for what it holds now, and says whose work each row is. 16MB: a sweep's
# DELETEs are sized by time (~50 ms each) where a sweep of one run deletes
# delete_batch_size rows a statement; at 1M rows (96 MB) half expired a pass took 0.24 s in
# ranges of 16MB against 0.30 s unshared (one DELETE: 0.21 s), on 2 cores.
UPGRADE = """
ALTER TABLE ttl.orphan_range RENAME TO block_range;
ALTER TABLE ttl.block_range ADD COLUMN work text NOT NULL DEFAULT 'orphans';
ALTER TABLE ttl.block_range ADD CONSTRAINT block_range_work CHECK (work IN ('orphans', 'delete'));
ALTER TABLE ttl.block_range RENAME CONSTRAINT orphan_range_status TO block_range_status;
ALTER INDEX ttl.orphan_range_pkey RENAME TO block_range_pkey;
DROP INDEX ttl.orphan_range_sweep;
CREATE INDEX block_range_sweep ON ttl.block_range (unit_relid, work, sweep);
INSERT INTO ttl.settings (name, value, description) VALUES
    ('row_range_bytes', '16MB',
     'a table (or partition) of at least two ranges of this size, swept in ctid order, is shared range by '
     'range by the runs working on it at once; 0: each is swept by one run')
ON CONFLICT (name) DO NOTHING;
ALTER TABLE ttl.settings ADD CONSTRAINT settings_row_range_bytes
    CHECK (name <> 'row_range_bytes' OR pg_catalog.pg_size_bytes(value) >= 0);
"""

DOWNGRADE = """
ALTER TABLE ttl.settings DROP CONSTRAINT settings_row_range_bytes;
DELETE FROM ttl.settings WHERE name = 'row_range_bytes';
DELETE FROM ttl.block_range WHERE work <> 'orphans';
DROP INDEX ttl.block_range_sweep;
CREATE INDEX orphan_range_sweep ON ttl.block_range (unit_relid, sweep);
ALTER INDEX ttl.block_range_pkey RENAME TO orphan_range_pkey;
ALTER TABLE ttl.block_range RENAME CONSTRAINT block_range_status TO orphan_range_status;
ALTER TABLE ttl.block_range DROP CONSTRAINT block_range_work;
ALTER TABLE ttl.block_range DROP COLUMN work;
ALTER TABLE ttl.block_range RENAME TO orphan_range;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
