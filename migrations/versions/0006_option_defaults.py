"""option defaults: the option registry (ttl.options) gives them, not the table's column defaults;
ttl_partition_ignore_value_ttl, stored but never acted on, goes

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from pg_ttl.install import execute_sql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The defaults of the table options lived twice: in ttl.policy's column
# DEFAULTs (which a direct INSERT used, ignoring the default_job_cron setting)
# and in the SQL API. The code layer's option registry (ttl.options, filled in
# by the validation trigger for any option left NULL) is now the only one.
OPTION_COLUMNS = ("job_cron", "job_cron_override", "select_batch_size", "delete_batch_size",
                  "select_rate_limit", "delete_rate_limit", "paused", "partition_action",
                  "strict_visibility", "value_ttl_overrides_table_ttl")

# "ttl_partition_ignore_value_ttl" was stored and shown but no engine path read
# it: an option without effect is worse than none. (The views read the column:
# the code layer recreates them after the migration.)
UPGRADE = "DROP VIEW IF EXISTS ttl.worker_tables, ttl.policies;\n" + "ALTER TABLE ttl.policy\n" + ",\n".join(
    [f"    ALTER COLUMN {c} DROP DEFAULT" for c in OPTION_COLUMNS]
    + ["    DROP COLUMN partition_ignore_value_ttl"]) + ";\n"

DOWNGRADE = """
ALTER TABLE ttl.policy
    ADD COLUMN partition_ignore_value_ttl boolean NOT NULL DEFAULT false,
    ALTER COLUMN job_cron SET DEFAULT '@hourly',
    ALTER COLUMN job_cron_override SET DEFAULT false,
    ALTER COLUMN select_batch_size SET DEFAULT 10000,
    ALTER COLUMN delete_batch_size SET DEFAULT 1000,
    ALTER COLUMN select_rate_limit SET DEFAULT 0,
    ALTER COLUMN delete_rate_limit SET DEFAULT 0,
    ALTER COLUMN paused SET DEFAULT false,
    ALTER COLUMN partition_action SET DEFAULT 'drop',
    ALTER COLUMN strict_visibility SET DEFAULT false,
    ALTER COLUMN value_ttl_overrides_table_ttl SET DEFAULT false;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
