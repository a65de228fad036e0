"""an index on the runs still going

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from pg_ttl.install import execute_sql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# ttl.close_dead_runs() (every engine session's housekeeping, and every CALL ttl.run())
# looks for runs with status 'running': with a history of 30 days of hourly runs over
# 10,000 tables (7 million rows) it read all of them. This index holds only the few
# runs going.
UPGRADE = """
CREATE INDEX IF NOT EXISTS run_running ON ttl.run (run_id) WHERE status = 'running';
"""

DOWNGRADE = """
DROP INDEX IF EXISTS ttl.run_running;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
