"""the adaptive throttle: its settings, and each worker's current pace

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from pg_ttl.install import execute_sql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The engine slows down while other sessions' statements run slower than when it rests,
# or while a replica falls behind (pg_ttl/expire/pace.py). Settings, like the other global ones; the worker reports its
# current pace with its heartbeat (ttl.worker.pace) for pg-ttl status.
UPGRADE = """
INSERT INTO ttl.settings (name, value, description) VALUES
    ('throttle', 'on',
     'on: the engine slows down while other sessions run slower than when it rests; off: full speed '
     '(each policy''s delete_rate_limit applies either way)'),
    ('throttle_target', '1.5',
     'how much slower (90th percentile, server time) other sessions'' statements may run while the engine '
     'works than while it rests before it slows down'),
    ('throttle_replica_lag', '256MB',
     'the engine also slows down while a replica has more than this much WAL left to replay')
ON CONFLICT (name) DO NOTHING;
ALTER TABLE ttl.settings ADD CONSTRAINT settings_throttle
    CHECK (name <> 'throttle' OR value IN ('on', 'off'));
ALTER TABLE ttl.settings ADD CONSTRAINT settings_throttle_target
    CHECK (name <> 'throttle_target' OR (value ~ '^[0-9]+(\\.[0-9]+)?$' AND value::numeric > 1));
ALTER TABLE ttl.settings ADD CONSTRAINT settings_throttle_replica_lag
    CHECK (name <> 'throttle_replica_lag' OR pg_catalog.pg_size_bytes(value) > 0);
ALTER TABLE ttl.worker ADD COLUMN pace text;
"""

DOWNGRADE = """
DROP FUNCTION IF EXISTS ttl.worker_heartbeat(text, text, integer, text, text, integer, jsonb, text);
ALTER TABLE ttl.worker DROP COLUMN pace;
ALTER TABLE ttl.settings DROP CONSTRAINT settings_throttle_replica_lag;
ALTER TABLE ttl.settings DROP CONSTRAINT settings_throttle_target;
ALTER TABLE ttl.settings DROP CONSTRAINT settings_throttle;
DELETE FROM ttl.settings WHERE name IN ('throttle', 'throttle_target', 'throttle_replica_lag');
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
