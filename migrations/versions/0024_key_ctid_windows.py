"""a key with more rows than a window: ctid windows sized by ttl.key_window_slots

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# No table changes. pg-ttl run and the worker of this version size a key's ctid windows
# with ttl.block_slots and ttl.key_window_slots, and CALL ttl.run() reads new statements
# of ttl.window_sql (sql/52_delete_rows.sql), all of which the code layer's replay after
# this upgrade creates. The revision is what tells a database still without them to run
# pg-ttl upgrade (pg-ttl refuses to run against an older revision) rather than fail in
# the middle of a run.


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
