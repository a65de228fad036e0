"""one target for how long an expiry transaction takes (ttl.transaction_seconds)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29
"""

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# No table changes. pg-ttl run and the worker of this version read ttl._pass_settings()'s
# new column transaction_seconds (ttl.transaction_seconds(), sql/52_delete_rows.sql),
# which the code layer's replay after this upgrade creates. The revision is what tells a
# database still without it to run pg-ttl upgrade (pg-ttl refuses to run against an older
# revision) rather than fail at a pass's start.


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
