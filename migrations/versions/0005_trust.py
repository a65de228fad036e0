"""trust: history written only by a table's owners, runs that know their session, resume points

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from pg_ttl.install import execute_sql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Run history and checkpoints decide what the engine does next (a finished unit
# is skipped, a checkpoint is resumed from), so only a member of the table's
# owning role may write them, like the policy itself; everyone reads.
# A run records the server session that runs it (pid + its start time), so a
# later pass can tell a run still going from one whose process died, and close
# the latter as 'interrupted' instead of leaving it 'running' forever.
# run_unit.resumed_from is the checkpoint a unit started from (NULL: from the start).
UPGRADE = """
CREATE FUNCTION ttl._session_start() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()
$fn$;

ALTER TABLE ttl.run
    ADD COLUMN backend_pid integer DEFAULT pg_catalog.pg_backend_pid(),
    ADD COLUMN backend_start timestamptz DEFAULT ttl._session_start();
ALTER TABLE ttl.run_unit ADD COLUMN resumed_from jsonb;

ALTER TABLE ttl.run ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.run FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.run FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'MEMBER'));

ALTER TABLE ttl.run_unit ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.run_unit FOR SELECT USING (true);
CREATE POLICY owner_writes ON ttl.run_unit FOR ALL
    USING (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM ttl.run r JOIN pg_catalog.pg_class c ON c.oid = r.relid
             WHERE r.run_id = run_unit.run_id), 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(current_user,
           (SELECT c.relowner FROM ttl.run r JOIN pg_catalog.pg_class c ON c.oid = r.relid
             WHERE r.run_id = run_unit.run_id), 'MEMBER'));

-- A worker's row is written by the role that runs it.
ALTER TABLE ttl.worker ADD COLUMN role name NOT NULL DEFAULT current_user;
ALTER TABLE ttl.worker ENABLE ROW LEVEL SECURITY;
CREATE POLICY read_all ON ttl.worker FOR SELECT USING (true);
CREATE POLICY own_row ON ttl.worker FOR ALL USING (role = current_user) WITH CHECK (role = current_user);
"""

DOWNGRADE = """
DROP POLICY own_row ON ttl.worker;
DROP POLICY read_all ON ttl.worker;
ALTER TABLE ttl.worker DISABLE ROW LEVEL SECURITY;
ALTER TABLE ttl.worker DROP COLUMN role;
DROP POLICY owner_writes ON ttl.run_unit;
DROP POLICY read_all ON ttl.run_unit;
ALTER TABLE ttl.run_unit DISABLE ROW LEVEL SECURITY;
DROP POLICY owner_writes ON ttl.run;
DROP POLICY read_all ON ttl.run;
ALTER TABLE ttl.run DISABLE ROW LEVEL SECURITY;
ALTER TABLE ttl.run_unit DROP COLUMN resumed_from;
ALTER TABLE ttl.run DROP COLUMN backend_start, DROP COLUMN backend_pid;
DROP FUNCTION ttl._session_start();
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
