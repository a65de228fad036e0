"""row_column_ttl: per-row expiry, column TTL write times, strict visibility

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from pg_ttl.install import execute_sql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Per-row TTL ("ttl_expire_after" without "ttl_column") adds two columns to the
# user's table: the row's absolute expiry and its last write time. The policy
# remembers their attnums so that disabling removes exactly what was added.
# A column TTL counts from the table's TTL base ('row') or from the value's own
# write time ('write'); the latter adds one tstzrange column per TTL'd column,
# [write time, expiry), kept by a DEFAULT and an UPDATE OF trigger.
UPGRADE = """
ALTER TABLE ttl.policy
    ADD COLUMN row_expiry_attnum smallint,
    ADD COLUMN row_write_attnum smallint,
    ADD COLUMN strict_visibility boolean NOT NULL DEFAULT false,
    ADD COLUMN strict_enabled_rls boolean NOT NULL DEFAULT false,
    ADD COLUMN partition_ignore_value_ttl boolean NOT NULL DEFAULT false,
    ADD COLUMN value_ttl_overrides_table_ttl boolean NOT NULL DEFAULT false;

ALTER TABLE ttl.column_policy
    ADD COLUMN relative_to text,
    ADD COLUMN track_attnum smallint,
    ADD CONSTRAINT column_policy_relative_to CHECK (relative_to IN ('row', 'write'));

-- Column TTL work of the engine, per unit of a run.
ALTER TABLE ttl.run_unit ADD COLUMN values_nulled bigint NOT NULL DEFAULT 0;
"""

DOWNGRADE = """
-- The views read the new columns; the code layer recreates them at head.
-- (env.py drops every view of schema ttl before a downgrade, and stops with a
-- clear error if a user's view depends on one; this line keeps an offline
-- downgrade script working: ttl.worker_tables reads ttl.policies.)
DROP VIEW IF EXISTS ttl.worker_tables, ttl.policies, ttl.column_policies;
ALTER TABLE ttl.run_unit DROP COLUMN values_nulled;
ALTER TABLE ttl.column_policy
    DROP CONSTRAINT column_policy_relative_to,
    DROP COLUMN track_attnum,
    DROP COLUMN relative_to;
ALTER TABLE ttl.policy
    DROP COLUMN value_ttl_overrides_table_ttl,
    DROP COLUMN partition_ignore_value_ttl,
    DROP COLUMN strict_enabled_rls,
    DROP COLUMN strict_visibility,
    DROP COLUMN row_write_attnum,
    DROP COLUMN row_expiry_attnum;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
