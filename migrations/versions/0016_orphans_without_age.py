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
# transaction that wrote it had ended before a sample of the table's "xid clock" taken
# at least min_age before the run (sql/80_orphans.sql). ttl.xid_clock holds those
# samples: when (sampled_at) the oldest transaction still running had the id xid, per
# child table (relid). Written like the policies, only by the table's owners (row
# security): a forged sample could make young rows look old, and so only in one's own
# table. ttl.orphan_range.error keeps why a range failed: a range that keeps failing
# is given up for its sweep, and says why.
UPGRADE = """
ALTER TABLE ttl.orphan_policy ALTER COLUMN age_attnum DROP NOT NULL;
CREATE TABLE ttl.xid_clock (
    relid      oid NOT NULL,
    sampled_at timestamptz NOT NULL,
    xid        xid8 NOT NULL,
    PRIMARY KEY (relid, sampled_at)
);
ALTER TABLE ttl.xid_clock ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.xid_clock FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.xid_clock FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT, INSERT, DELETE ON ttl.xid_clock TO PUBLIC;
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
