"""a run's session start read from its own backend's row (ttl._session_start)

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-30
"""

from pg_ttl.install import execute_sql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

# ttl.run.backend_start's DEFAULT, evaluated by every run. pg_stat_activity reads every
# backend's row (and joins pg_database and pg_authid) to find one; the function under it,
# given the backend's pid, reads that backend's row alone. ttl._session_start(), median of
# 120 calls: 1.50 -> 0.43 ms as a new session's first call, 0.62 -> 0.19 ms after. Same
# value, same visibility rules (the view is built on that function).
# The code layer's replay after this upgrade also brings ttl.window_sql's opening forms,
# which CALL ttl.run() of this version uses for a unit's first key window
# (sql/52_delete_rows.sql, sql/55_run_procedure.sql); the revision is what tells a
# database still without them to run pg-ttl upgrade.
UPGRADE = """
CREATE OR REPLACE FUNCTION ttl._session_start() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT a.backend_start FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a
$fn$;
"""

DOWNGRADE = """
CREATE OR REPLACE FUNCTION ttl._session_start() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()
$fn$;
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
