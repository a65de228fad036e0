"""key windows guessed past the second, sized by one rule (ttl.window_guess, ttl.window_rows)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29
"""

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# No table changes. pg-ttl run and the worker of this version call ttl.window_guess and
# ttl.window_rows, functions of the code layer (sql/52_delete_rows.sql), which the code
# layer's replay after this upgrade creates. The revision is what tells a database still
# without them to run pg-ttl upgrade (pg-ttl refuses to run against an older revision)
# rather than fail in the middle of a unit. A downgrade leaves them, as it leaves every
# function.


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
