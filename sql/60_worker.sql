-- Worker coordination: which tick of a table's schedule is running, on which
-- workers. A worker taking part in a run of a table holds a shared session
-- advisory lock on (0x74746C77 "ttlw" << 32 | relid) for the whole run; the
-- engine's per-unit claims use another namespace ("ttl\0"), so they never
-- collide. A dead worker's lock goes with its connection.

CREATE OR REPLACE FUNCTION ttl.worker_lock_key(p_relid oid) RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (1953786999::bigint << 32) | p_relid::bigint
$fn$;

-- Sessions other than this one taking part in a run of p_relid.
CREATE OR REPLACE FUNCTION ttl.worker_running(p_relid oid) RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT count(*)::integer
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND l.classid = 1953786999::oid AND l.objid = p_relid
       AND l.pid <> pg_catalog.pg_backend_pid()
$fn$;

-- Decide what to do with tick p_due of p_relid's schedule:
--   'start': nobody ran this tick; it is ours (the schedule row now says so)
--   'join' : another worker started this tick and is still at it; help (the
--            engine's claims split the partitions)
--   'skip' : an older tick's run is still going: this tick is skipped
--   'resume': this tick's run was interrupted and nobody is at it: take it up again
--   'done' : this tick (or a later one) was already run
-- For 'start', 'join' and 'resume' the caller holds the run lock until ttl.worker_end_run.
-- round_started: when the starter began this tick's run; every worker taking
-- part passes it to the engine as the cutoff, so they all expire the same rows.
CREATE OR REPLACE FUNCTION ttl.worker_begin_run(p_relid oid, p_due timestamptz, p_worker text,
                                                OUT verdict text, OUT round_started timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s ttl.worker_schedule;
    others integer;
    started timestamptz := pg_catalog.clock_timestamp();
BEGIN
    INSERT INTO ttl.worker_schedule (relid) VALUES (p_relid) ON CONFLICT (relid) DO NOTHING;
    -- Serialises deciders of one table. The run lock is taken only once this one
    -- has decided to run (below, before the row lock is released at commit), so
    -- the holders counted here are workers at it, never deciders (two workers
    -- deciding at once would otherwise each see the other as a runner and skip).
    SELECT * INTO s FROM ttl.worker_schedule WHERE relid = p_relid FOR UPDATE;
    others := ttl.worker_running(p_relid);
    IF s.due_at IS NULL OR s.due_at < p_due THEN
        IF others > 0 THEN
            verdict := 'skip';
            RETURN;
        END IF;
        UPDATE ttl.worker_schedule
           SET due_at = p_due, started_at = started, finished_at = NULL,
               started_by = p_worker, last_status = 'running'
         WHERE relid = p_relid;
        -- Wake the other workers: they may join this round (partitioned tables).
        PERFORM pg_catalog.pg_notify('pg_ttl', 'run ' || p_relid::regclass::text);
        verdict := 'start';
        round_started := started;
    ELSIF s.due_at = p_due AND others > 0 THEN
        verdict := 'join';
        round_started := s.started_at;
    ELSIF s.due_at = p_due AND s.finished_at IS NULL AND s.started_at IS NOT NULL THEN
        -- Nobody is at it, yet the round never finished: its worker died, lost the
        -- server, or was stopped mid-run. Take it up again with the same cutoff
        -- (the engine resumes each unit from its checkpoint).
        UPDATE ttl.worker_schedule SET started_by = p_worker, last_status = 'running' WHERE relid = p_relid;
        verdict := 'resume';
        round_started := s.started_at;
    ELSE
        verdict := 'done';
        RETURN;
    END IF;
    PERFORM pg_catalog.pg_advisory_lock_shared(ttl.worker_lock_key(p_relid));
END
$fn$;

CREATE OR REPLACE FUNCTION ttl.worker_end_run(p_relid oid, p_due timestamptz, p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- 'interrupted' (the worker is stopping mid-run) leaves the round open, to be resumed.
    -- So does the end of one participant while others are still at the round: it is
    -- finished by the last one out; if they die, the round is resumed.
    UPDATE ttl.worker_schedule
       SET finished_at = CASE WHEN p_status = 'interrupted' OR ttl.worker_running(p_relid) > 0 THEN NULL
                              ELSE pg_catalog.clock_timestamp() END,
           last_status = p_status
     WHERE relid = p_relid AND due_at = p_due;
    PERFORM pg_catalog.pg_advisory_unlock_shared(ttl.worker_lock_key(p_relid));
END
$fn$;

-- p_pace: the adaptive throttle's pace in the worker's latest run, and why (pg_ttl/expire/pace.py).
CREATE OR REPLACE FUNCTION ttl.worker_heartbeat(p_name text, p_host text, p_pid integer, p_version text,
                                                p_state text, p_tables integer, p_skipped jsonb,
                                                p_pace text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO ttl.worker AS w (name, host, pid, version, state, tables, skipped, pace)
    VALUES (p_name, p_host, p_pid, p_version, p_state, p_tables, p_skipped, p_pace)
    ON CONFLICT (name) DO UPDATE
       SET heartbeat_at = pg_catalog.now(), state = excluded.state, tables = excluded.tables,
           host = excluded.host, pid = excluded.pid, version = excluded.version, skipped = excluded.skipped,
           pace = excluded.pace,
           started_at = CASE WHEN w.pid <> excluded.pid THEN pg_catalog.now() ELSE w.started_at END
$fn$;

-- What the worker schedules: every table policy, plus tables that only have
-- column policies (scheduled by the default_job_cron setting) or only an
-- orphan policy (by its job_cron, else that setting; its parent's runs also
-- run it, right after theirs).
-- manual_run_at: when the table's latest run started, if that run succeeded and
-- no worker ran it (pg-ttl run, the Python API, CALL ttl.run()): the worker and
-- pg-ttl status take it as the run of the cron tick before it (worker/schedule.py).
CREATE OR REPLACE VIEW ttl.worker_tables AS
SELECT t.relid, t.table_name, t.schema_name, t.relname, t.job_cron, t.job_cron_override, t.paused,
       t.created_at, t.kind,
       CASE WHEN l.status = 'ok'
             AND NOT EXISTS (SELECT 1 FROM ttl.worker w WHERE w.name = l.worker)
             AND NOT EXISTS (SELECT 1 FROM ttl.worker_schedule s WHERE s.relid = t.relid AND s.started_by = l.worker)
            THEN l.started_at END AS manual_run_at
  FROM (
       SELECT p.relid, p.table_name, p.schema_name, p.relname, p.job_cron, p.job_cron_override, p.paused,
              p.created_at, 'table'::text AS kind
         FROM ttl.policies p
       UNION ALL
       SELECT cp.relid, cp.relid::regclass::text, n.nspname, c.relname,
              coalesce((SELECT s.value FROM ttl.settings s WHERE s.name = 'default_job_cron'), '@hourly'),
              false, false, min(cp.created_at), 'columns'::text
         FROM ttl.column_policy cp
         JOIN pg_catalog.pg_class c ON c.oid = cp.relid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = cp.relid)
        GROUP BY cp.relid, n.nspname, c.relname
       UNION ALL
       SELECT op.relid, op.relid::regclass::text, n.nspname, c.relname,
              coalesce(op.job_cron, (SELECT s.value FROM ttl.settings s WHERE s.name = 'default_job_cron'), '@hourly'),
              false, false, op.created_at, 'orphans'::text
         FROM ttl.orphan_policy op
         JOIN pg_catalog.pg_class c ON c.oid = op.relid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = op.relid)
          AND NOT EXISTS (SELECT 1 FROM ttl.column_policy cp WHERE cp.relid = op.relid)
       ) t
  LEFT JOIN LATERAL (SELECT r.started_at, r.status, r.worker FROM ttl.run r
                      WHERE r.relid = t.relid AND r.status <> 'busy'
                      ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1) l ON true;

GRANT SELECT ON ttl.worker_tables TO PUBLIC;
