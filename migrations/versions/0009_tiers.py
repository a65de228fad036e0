"""tiers: expiring rows moved to storage (Parquet files) before they are deleted

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from pg_ttl.install import execute_sql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# ttl.storage: where tiers write (a URL; credentials never stored here), made and
# dropped by its owner. ttl.tier: a table's storage tiers, in order (the final
# DELETE is the policy's own expire_after). ttl.archive: the manifest, one row
# per verified object, committed together with the DELETE of its rows: a row is
# in the table or in exactly one object listed here; min_time/max_time: the
# range of the rows' TTL column (as instants). Row security: everybody
# reads, owners write their own (as ttl.policy).
UPGRADE = """
CREATE TABLE ttl.storage (
    name       text PRIMARY KEY,
    url        text NOT NULL,
    owner      name NOT NULL DEFAULT current_user,
    created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE ttl.storage ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.storage FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.storage FOR ALL
    USING (pg_catalog.pg_has_role(current_user, owner, 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user, owner, 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.storage TO PUBLIC;

CREATE TABLE ttl.tier (
    relid    oid NOT NULL,
    position integer NOT NULL,
    after    interval NOT NULL,
    storage  text NOT NULL REFERENCES ttl.storage (name),
    PRIMARY KEY (relid, position)
);
CREATE INDEX tier_storage ON ttl.tier (storage);
ALTER TABLE ttl.tier ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.tier FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.tier FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.tier TO PUBLIC;

CREATE TABLE ttl.archive (
    object_id   bigserial PRIMARY KEY,
    relid       oid NOT NULL,
    table_name  text NOT NULL,
    tier        integer NOT NULL,
    storage     text NOT NULL,
    object_key  text NOT NULL UNIQUE,
    rows        bigint NOT NULL,
    bytes       bigint NOT NULL,
    sha256      text NOT NULL,
    min_time    timestamptz,
    max_time    timestamptz,
    run_id      bigint,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX archive_relid ON ttl.archive (relid, min_time);
ALTER TABLE ttl.archive ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.archive FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.archive FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));
GRANT SELECT, INSERT, UPDATE, DELETE ON ttl.archive TO PUBLIC;
GRANT USAGE ON SEQUENCE ttl.archive_object_id_seq TO PUBLIC;

ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action
    CHECK (action IN ('delete', 'drop', 'detach', 'skip', 'orphans', 'queue', 'archive'));
"""

DOWNGRADE = """
DROP TABLE ttl.archive;
DROP TABLE ttl.tier;
DROP TABLE ttl.storage;
DELETE FROM ttl.run_unit WHERE action = 'archive';
ALTER TABLE ttl.run_unit DROP CONSTRAINT run_unit_action,
    ADD CONSTRAINT run_unit_action CHECK (action IN ('delete', 'drop', 'detach', 'skip', 'orphans', 'queue'));
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
