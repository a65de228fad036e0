"""engine: run history, progress checkpoints, unit claims

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from pg_ttl.install import execute_sql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# One row per run of one table (ttl.run) and per unit of work in it
# (ttl.run_unit: a leaf partition, a partition removed whole, or the table).
# The unit row also holds the unit's checkpoint: it is updated in the same
# transaction as each delete, so counters are exact and a killed run resumes
# where its last committed batch ended. Claims are session advisory locks
# (nothing stored): they vanish with the process that held them.
UPGRADE = """
INSERT INTO ttl.settings (name, value, description) VALUES
    ('row_lock_timeout', '50ms',
     'lock_timeout of the fast delete path; a range that hits it is redone with SKIP LOCKED'),
    ('row_strategy', 'auto',
     'how rows are found: auto (key ranges over a btree on the TTL column when few rows are expired, '
     'else ctid block ranges), index, or ctid')
ON CONFLICT (name) DO NOTHING;
ALTER TABLE ttl.settings ADD CONSTRAINT settings_row_strategy
    CHECK (name <> 'row_strategy' OR value IN ('auto', 'index', 'ctid'));

CREATE TABLE ttl.run (
    run_id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relid               oid NOT NULL,
    table_name          text NOT NULL,
    worker              text,
    cutoff              timestamptz NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at         timestamptz,
    status              text NOT NULL DEFAULT 'running',
    rows_selected       bigint NOT NULL DEFAULT 0,
    rows_deleted        bigint NOT NULL DEFAULT 0,
    partitions_dropped  integer NOT NULL DEFAULT 0,
    partitions_detached integer NOT NULL DEFAULT 0,
    error               text,
    CONSTRAINT run_status CHECK (status IN ('running', 'ok', 'partial', 'failed', 'paused', 'busy', 'interrupted'))
);
CREATE INDEX run_relid_started ON ttl.run (relid, started_at DESC);
CREATE INDEX run_started ON ttl.run (started_at);

CREATE TABLE ttl.run_unit (
    run_id        bigint NOT NULL REFERENCES ttl.run ON DELETE CASCADE,
    unit_relid    oid NOT NULL,
    unit_name     text NOT NULL,
    action        text NOT NULL,
    strategy      text,
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at   timestamptz,
    status        text NOT NULL DEFAULT 'running',
    rows_selected bigint NOT NULL DEFAULT 0,
    rows_deleted  bigint NOT NULL DEFAULT 0,
    error         text,
    checkpoint    jsonb,
    PRIMARY KEY (run_id, unit_relid),
    CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip')),
    CONSTRAINT run_unit_status CHECK (status IN ('running', 'ok', 'partial', 'timeout', 'failed', 'skipped',
                                                 'interrupted'))
) WITH (fillfactor = 50);
-- Resume looks up the unfinished unit rows of one partition. No index may cover
-- the counters, checkpoint or status (not even in a predicate): the row is
-- updated once per delete batch and must stay a HOT update, or every update
-- leaves index entries that the next one has to step over.
CREATE INDEX run_unit_relid ON ttl.run_unit (unit_relid);

-- Whoever may run the engine on their table (its owner) records its runs.
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.run, ttl.run_unit TO PUBLIC;
"""

DOWNGRADE = """
DROP TABLE ttl.run_unit, ttl.run;
ALTER TABLE ttl.settings DROP CONSTRAINT settings_row_strategy;
DELETE FROM ttl.settings WHERE name IN ('row_lock_timeout', 'row_strategy');
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
