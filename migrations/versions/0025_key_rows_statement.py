"""a key's first and last row by one statement (ttl.key_rows_sql); a table's name by one (ttl._resolve_table)

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

# No table changes. pg-ttl run and the worker of this version read a key's first and last
# row by ttl.key_rows_sql (sql/52_delete_rows.sql), the statement CALL ttl.run() runs too,
# and pg-ttl run resolves the tables it is given by ttl._resolve_table (sql/20_api.sql),
# both of which the code layer's replay after this upgrade creates. The revision is what tells a
# database still without it to run pg-ttl upgrade (pg-ttl refuses to run against an older
# revision) rather than fail in the middle of a run.


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
