"""key windows hide their constants from the planner's estimates (ttl._constant_sql)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# No table changes. pg-ttl run and the worker of this version call ttl.expired_sql with
# its new argument hide_constants (sql/15_expiry.sql), which the code layer's replay
# after this upgrade creates. The revision is what tells a database still without it to
# run pg-ttl upgrade (pg-ttl refuses to run against an older revision) rather than fail
# at a run's start.


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
