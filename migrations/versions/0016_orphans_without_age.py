"""orphans: policies without an age column (the xid clock), a range's error

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# An orphan policy may now have no age column: a child row then goes only once the
# transaction that wrote it had ended before a sample of the "xid clock" taken at
# least min_age before the run (sql/80_orphans.sql). ttl.xid_clock holds those
# samples: when (sampled_at) the oldest transaction still running had the id xid;
# written only by ttl.xid_clock_tick() (SECURITY DEFINER), never by users, who
# could otherwise make young rows look old. ttl.orphan_range.error keeps why a
# range failed: a range that keeps failing is given up for its sweep, and says why.
UPGRADE = """
ALTER TABLE ttl.orphan_policy ALTER COLUMN age_attnum DROP NOT NULL;
CREATE TABLE ttl.xid_clock (
    sampled_at timestamptz PRIMARY KEY,
    xid        xid8 NOT NULL
);
ALTER TABLE ttl.xid_clock ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.xid_clock FOR SELECT USING (true);
GRANT SELECT ON ttl.xid_clock TO PUBLIC;
ALTER TABLE ttl.orphan_range ADD COLUMN error text;
"""

# Policies without an age column cannot be kept by the older schema: they go.
DOWNGRADE = """
ALTER TABLE ttl.orphan_range DROP COLUMN error;
DROP TABLE ttl.xid_clock;
DELETE FROM ttl.orphan_policy WHERE age_attnum IS NULL;
ALTER TABLE ttl.orphan_policy ALTER COLUMN age_attnum SET NOT NULL;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
