"""catalog: per-table and per-column policies, global settings

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from pg_ttl.install import execute_sql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Tables only: functions, views and event triggers live in sql/*.sql and are
# (re)applied after every upgrade by env.py.
CATALOG = """
CREATE TABLE ttl.settings (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    description text NOT NULL
);
INSERT INTO ttl.settings (name, value, description) VALUES
    ('default_job_cron', '@hourly', 'schedule of a policy that sets no ttl_job_cron'),
    ('min_job_interval', '15 minutes',
     'policies may not be scheduled more often than this (ttl_job_cron_override lifts it)'),
    ('history_retention', '30 days', 'run history older than this is removed'),
    ('lock_timeout', '1s', 'lock_timeout of every engine transaction'),
    ('statement_timeout', '30s', 'statement_timeout of every engine transaction');

-- One row per TTL'd table, keyed by oid so that a rename keeps the policy.
-- The TTL column is kept as attnum (+ type oid, to notice a retype).
CREATE TABLE ttl.policy (
    relid                 oid PRIMARY KEY,
    ttl_attnum            smallint,
    ttl_atttypid          oid,
    expiration_expression text,
    expire_after          interval,
    unit                  text,
    job_cron              text NOT NULL DEFAULT '@hourly',
    job_cron_override     boolean NOT NULL DEFAULT false,
    select_batch_size     integer NOT NULL DEFAULT 10000,
    delete_batch_size     integer NOT NULL DEFAULT 1000,
    select_rate_limit     integer NOT NULL DEFAULT 0,
    delete_rate_limit     integer NOT NULL DEFAULT 0,
    paused                boolean NOT NULL DEFAULT false,
    partition_action      text NOT NULL DEFAULT 'drop',
    detach_schema         name,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT policy_has_expiry CHECK (ttl_attnum IS NOT NULL OR expiration_expression IS NOT NULL
                                        OR expire_after IS NOT NULL),
    CONSTRAINT policy_unit CHECK (unit IN ('seconds', 'milliseconds', 'microseconds', 'nanoseconds')),
    CONSTRAINT policy_batch_sizes CHECK (select_batch_size >= 1 AND delete_batch_size >= 1),
    CONSTRAINT policy_rate_limits CHECK (select_rate_limit >= 0 AND delete_rate_limit >= 0),
    CONSTRAINT policy_partition_action CHECK (partition_action IN ('drop', 'detach'))
);

-- Column TTL: the value becomes NULL (or its default), the row stays.
CREATE TABLE ttl.column_policy (
    relid        oid NOT NULL,
    attnum       smallint NOT NULL,
    atttypid     oid NOT NULL,
    expire_after interval NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relid, attnum)
);

-- Any table owner may manage the TTL of their own tables through the SQL API;
-- row security keeps them to their own tables, whatever entry point they use.
ALTER TABLE ttl.policy ENABLE ROW LEVEL SECURITY;
ALTER TABLE ttl.column_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.policy FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.policy FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
CREATE POLICY read_all ON ttl.column_policy FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.column_policy FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));

GRANT USAGE ON SCHEMA ttl TO PUBLIC;
GRANT SELECT ON ttl.settings TO PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.policy, ttl.column_policy TO PUBLIC;
"""


def upgrade() -> None:
    execute_sql(CATALOG)


def downgrade() -> None:
    execute_sql("DROP TABLE ttl.column_policy, ttl.policy, ttl.settings")
