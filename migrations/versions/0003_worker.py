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

# ttl.worker_schedule: per table, the cron tick of the latest run any worker
# started, so workers on several hosts agree on what is due and `pg-ttl status`
# can say when the next run is. ttl.worker: one row per worker process
# (heartbeat), for `pg-ttl status`. Which worker is running a table right now
# is not stored: it is a session advisory lock (see sql/60_worker.sql), which
# vanishes with a dead worker's connection.
UPGRADE = """
CREATE TABLE ttl.worker_schedule (
    relid       oid PRIMARY KEY,
    due_at      timestamptz,
    started_at  timestamptz,
    finished_at timestamptz,
    started_by  text,
    last_status text
);

CREATE TABLE ttl.worker (
    name         text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    state        text NOT NULL DEFAULT 'running',
    tables       integer NOT NULL DEFAULT 0
);

-- Like ttl.policy: everyone reads; only members of a table's owning role
-- (the worker must be one, to delete and drop) write its schedule row.
ALTER TABLE ttl.worker_schedule ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.worker_schedule FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.worker_schedule FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.worker_schedule TO PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.worker TO PUBLIC;
"""

DOWNGRADE = """
DROP TABLE ttl.worker, ttl.worker_schedule;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
