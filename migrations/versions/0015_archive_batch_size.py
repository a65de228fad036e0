"""tiers: ttl_archive_batch_size, the rows an archive step reads

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# An archive step (pg_ttl/expire/tiers/batches.py) reads its rows without a lock and
# writes them to storage before one short transaction deletes them: its size bounds that
# DELETE and sets the objects' size (one per day of the TTL column per step), not how long
# rows stay locked, so it has an option of its own rather than ttl_select_batch_size. Its
# default comes from the option registry (ttl.options), as the other options' do.
# (existing policies get the default as the column is added: no UPDATE, which would run
# the validation trigger of whatever code was installed before the upgrade)
UPGRADE = """
ALTER TABLE ttl.policy ADD COLUMN archive_batch_size integer NOT NULL DEFAULT 50000,
    ADD CONSTRAINT policy_archive_batch_size CHECK (archive_batch_size >= 1);
ALTER TABLE ttl.policy ALTER COLUMN archive_batch_size DROP DEFAULT;
"""

DOWNGRADE = """
DROP VIEW IF EXISTS ttl.worker_tables, ttl.policies;
ALTER TABLE ttl.policy DROP COLUMN archive_batch_size;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
