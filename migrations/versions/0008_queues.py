"""expiration queues: each row's expiry kept in N side tables beside the table

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from pg_ttl.install import execute_sql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# ttl.policy.queue_shards: the option (0 = no queue). ttl.queue: the queue of a
# table, created and dropped by ttl._queue_sync (sql/78_queues.sql) to match the
# option; the filling of existing rows (backfill_after, backfilled) is advanced by
# the table's owner (the engine, as the owner), so row security lets owners
# update their own rows only.
UPGRADE = """
ALTER TABLE ttl.policy ADD COLUMN queue_shards integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT policy_queue_shards CHECK (queue_shards BETWEEN 0 AND 1024);

CREATE TABLE ttl.queue (
    relid          oid PRIMARY KEY,
    queue_relid    oid NOT NULL,
    shards         integer NOT NULL,
    key_attnums    smallint[] NOT NULL,
    backfill_after jsonb,
    backfilled     boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE ttl.queue ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.queue FOR SELECT USING (true);
CREATE POLICY owner_updates ON ttl.queue FOR UPDATE
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT ON ttl.queue TO PUBLIC;
GRANT UPDATE (backfill_after, backfilled) ON ttl.queue TO PUBLIC;

ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip', 'orphans', 'queue'));
"""

DOWNGRADE = """
DO $$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT relid FROM ttl.queue LOOP
        PERFORM ttl._queue_drop(q.relid);
    END LOOP;
END
$$;
DROP TABLE ttl.queue;
ALTER TABLE ttl.policy DROP COLUMN queue_shards;
DELETE FROM ttl.run_unit WHERE action = 'queue';
ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip', 'orphans'));
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
