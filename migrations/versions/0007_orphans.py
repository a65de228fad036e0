"""orphans: child rows whose parent row is gone, deleted range by range

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from pg_ttl.install import execute_sql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# One orphan policy per child table: its rows whose key has no row in the
# parent (through the parent's unique index on parent_attnums) and whose age
# column is older than min_age are deleted. Kept by oid (renames keep it),
# written only by the child's owners, like ttl.policy.
UPGRADE = """
CREATE TABLE ttl.orphan_policy (
    relid             oid PRIMARY KEY,
    key_attnums       smallint[] NOT NULL,
    parent_relid      oid NOT NULL,
    parent_attnums    smallint[] NOT NULL,
    min_age           interval NOT NULL,
    age_attnum        smallint NOT NULL,
    age_unit          text,
    job_cron          text,
    range_bytes       bigint NOT NULL,
    delete_batch_size integer NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX orphan_policy_parent ON ttl.orphan_policy (parent_relid);

ALTER TABLE ttl.orphan_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.orphan_policy FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.orphan_policy FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.orphan_policy TO PUBLIC;

-- A run's units that delete orphans are recorded as such.
ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip', 'orphans'));
"""

DOWNGRADE = """
DROP VIEW IF EXISTS ttl.worker_tables;
DROP TABLE ttl.orphan_policy;
DELETE FROM ttl.run_unit WHERE action = 'orphans';
ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip'));
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
