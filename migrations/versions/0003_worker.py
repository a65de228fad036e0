"""worker: worker registry and schedule state

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from pg_ttl.install import execute_sql

revision = "0003"
down_revision = "0002"
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
