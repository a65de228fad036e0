"""tiers: archive_before_delete, and the bytes and objects of archive units in the history

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from pg_ttl.install import execute_sql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# ttl.tier.archive_before_delete: set on a table's last storage tier when its
# tiers end with {"action": "delete", "archive_before_delete": true}: that tier
# also takes the rows already past the final DELETE (archived, then deleted),
# which are otherwise deleted without being archived. ttl.run_unit: what an
# archive unit wrote, counted in the transaction that deletes the rows (bytes:
# Parquet bytes, 0 for a PostgreSQL storage; objects: Parquet objects, or
# batches inserted into a PostgreSQL storage), beside its rows_deleted (the rows
# moved).
UPGRADE = """
ALTER TABLE ttl.tier ADD COLUMN archive_before_delete boolean NOT NULL DEFAULT false;
ALTER TABLE ttl.run_unit
    ADD COLUMN bytes_archived bigint NOT NULL DEFAULT 0,
    ADD COLUMN objects_archived bigint NOT NULL DEFAULT 0;
"""

DOWNGRADE = """
ALTER TABLE ttl.run_unit DROP COLUMN objects_archived, DROP COLUMN bytes_archived;
ALTER TABLE ttl.tier DROP COLUMN archive_before_delete;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
