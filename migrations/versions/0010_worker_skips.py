"""worker skips: the tables a worker cannot act on, and why, for pg-ttl status

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# A worker whose role is not a member of a table's owner cannot act on it (it
# would run the owner's code with someone else's rights). It skips the table
# and says so once; its own ttl.worker row keeps the list (table -> reason) so
# that pg-ttl status shows it. Row security already lets a worker write only
# its own row.
UPGRADE = """
ALTER TABLE ttl.worker ADD COLUMN skipped jsonb NOT NULL DEFAULT '{}';
"""

DOWNGRADE = """
ALTER TABLE ttl.worker DROP COLUMN skipped;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
