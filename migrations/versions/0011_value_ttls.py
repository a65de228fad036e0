"""value TTLs: CQL-style tables (a TTL per value), partitions dropped by their latest expiry

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# A CQL-style table ("ttl_value_ttls", or CQL's default_time_to_live in TTL
# DDL) keeps, beside the per-row TTL columns, one jsonb column of the values
# that carry their own TTL; the policy remembers its attnum. "ttl_ignore_value_ttl"
# expires a range partition by the table TTL alone (YugabyteDB's
# file_expiration_ignore_value_ttl). ttl.partition_expiry keeps, per leaf
# partition of a per-row TTL table, the latest write and the latest expiry
# written to it, so that a partition can be dropped whole without scanning it.
UPGRADE = """
ALTER TABLE ttl.policy
    ADD COLUMN value_ttls boolean NOT NULL DEFAULT false,
    ADD COLUMN row_values_attnum smallint,
    ADD COLUMN ignore_value_ttl boolean NOT NULL DEFAULT false;

CREATE TABLE ttl.partition_expiry (
    relid oid PRIMARY KEY,
    latest_write timestamptz NOT NULL,
    latest_expiry timestamptz NOT NULL,  -- 'infinity': something in it never expires
    complete boolean NOT NULL  -- every row is counted (a scan, or a partition created empty)
);
GRANT SELECT ON ttl.partition_expiry TO PUBLIC;

-- "ttl_value_ttl_overrides_table_ttl" did nothing on a table whose TTL counts from a
-- column or an expression; it is refused there from now on, so it is reset there.
UPDATE ttl.policy SET value_ttl_overrides_table_ttl = false
 WHERE value_ttl_overrides_table_ttl AND row_expiry_attnum IS NULL;

INSERT INTO ttl.settings (name, value, description) VALUES
    ('partition_expiry_step', '1 hour',
     'per-row TTL partitions: the latest write and expiry kept per partition are rounded up to this step '
     '(a partition receives one catalog update per step; it is dropped up to one step late)')
ON CONFLICT (name) DO NOTHING;
"""

DOWNGRADE = """
DROP VIEW IF EXISTS ttl.worker_tables, ttl.policies, ttl.column_policies;
DELETE FROM ttl.settings WHERE name = 'partition_expiry_step';
DROP TABLE ttl.partition_expiry;
ALTER TABLE ttl.policy
    DROP COLUMN ignore_value_ttl,
    DROP COLUMN row_values_attnum,
    DROP COLUMN value_ttls;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
