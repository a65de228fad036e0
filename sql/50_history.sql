-- Run history, shared by the Python engine (pg-ttl run, the worker) and
-- CALL ttl.run() (sql/55_run_procedure.sql): a run's and a unit's start and end,
-- totals, the last run of each table, retention, closing runs whose session
-- died, taking over a unit's checkpoint, and the per-unit claim key.

-- A run's totals, summed from its units: the one definition behind a finished
-- run's counters (ttl._finish_run) and the live ones of ttl.last_run.
CREATE OR REPLACE FUNCTION ttl._run_totals(run bigint,
    OUT rows_selected bigint, OUT rows_deleted bigint, OUT partitions_dropped integer,
    OUT partitions_detached integer, OUT units integer, OUT units_not_ok integer,
    OUT units_failed integer, OUT units_skipped integer, OUT first_error text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(sum(x.rows_selected), 0)::int8,
           coalesce(sum(x.rows_deleted), 0)::int8,
           (count(*) FILTER (WHERE x.action = 'drop' AND x.status = 'ok'))::int4,
           (count(*) FILTER (WHERE x.action = 'detach' AND x.status = 'ok'))::int4,
           count(*)::int4,
           (count(*) FILTER (WHERE x.status <> 'ok'))::int4,
           (count(*) FILTER (WHERE x.status = 'failed'))::int4,
           (count(*) FILTER (WHERE x.status = 'skipped'))::int4,
           (array_agg(x.error ORDER BY x.started_at) FILTER (WHERE x.status = 'failed'))[1]
      FROM ttl.run_unit x
     WHERE x.run_id = run
$fn$;

-- A run starts: its row in ttl.run, for the Python engine and CALL ttl.run() alike
-- ('running'; a run that ends as it starts, such as a paused table's, `finished`).
-- Runs with the caller's rights: only the table's owners may write its history.
CREATE OR REPLACE FUNCTION ttl._start_run(tbl oid, name text, run_worker text, run_cutoff timestamptz,
                                          run_status text DEFAULT 'running', run_error text DEFAULT NULL,
                                          finished boolean DEFAULT false) RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO ttl.run (relid, table_name, worker, cutoff, status, error, finished_at)
    VALUES (tbl, name, run_worker, run_cutoff, run_status, run_error, CASE WHEN finished THEN clock_timestamp() END)
    RETURNING run_id
$fn$;

-- A run ends: its counters are its units' totals; `run_status` NULL judges the
-- status from the units (a failed unit fails the run, all skipped is 'busy',
-- any other unit not ok makes it 'partial'). Returns the status recorded.
-- Runs with the caller's rights: only the table's owners may write its history.
CREATE OR REPLACE FUNCTION ttl._finish_run(run bigint, run_status text, run_error text) RETURNS text
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE ttl.run r
       SET finished_at = clock_timestamp(),
           status = coalesce(run_status, CASE WHEN t.units_failed > 0 THEN 'failed'
                                              WHEN t.units > 0 AND t.units_skipped = t.units THEN 'busy'
                                              WHEN t.units_not_ok > 0 THEN 'partial'
                                              ELSE 'ok' END),
           error = CASE WHEN run_status IS NULL AND t.units_failed > 0 THEN t.first_error ELSE run_error END,
           rows_selected = t.rows_selected, rows_deleted = t.rows_deleted,
           partitions_dropped = t.partitions_dropped, partitions_detached = t.partitions_detached
      FROM ttl._run_totals(run) t
     WHERE r.run_id = run
    RETURNING r.status
$fn$;

-- A unit starts: its row in the run's history, for the Python engine and
-- CALL ttl.run() alike. The checkpoint it resumes from is both its first
-- checkpoint (a run killed before its first range keeps it) and, for the
-- record, where it started (resumed_from).
CREATE OR REPLACE FUNCTION ttl._start_unit(run bigint, unit oid, unit_name text, action text, strategy text,
                                           resume jsonb) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, strategy, checkpoint, resumed_from)
    VALUES (run, unit, unit_name, action, strategy, resume, resume)
$fn$;

-- A unit ends. A unit done ('ok') or not ours to do ('skipped') has nothing
-- left to resume; any other keeps its checkpoint for the next run.
CREATE OR REPLACE FUNCTION ttl._finish_unit(run bigint, unit oid, unit_status text, unit_error text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    UPDATE ttl.run_unit
       SET status = unit_status, error = unit_error, finished_at = clock_timestamp(),
           checkpoint = CASE WHEN unit_status IN ('ok', 'skipped') THEN NULL ELSE checkpoint END
     WHERE run_id = run AND unit_relid = unit
$fn$;

-- A unit the run leaves without starting it (another run is on it, it was
-- dropped, it is done for this cutoff): recorded, with the reason.
CREATE OR REPLACE FUNCTION ttl._skip_unit(run bigint, unit oid, unit_name text, reason text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, status, error, finished_at)
    VALUES (run, unit, unit_name, 'skip', 'skipped', reason, clock_timestamp())
$fn$;

-- The last run of every table, with the totals of its units (exact even for a
-- run still going: unit counters commit with the rows they count).
CREATE OR REPLACE VIEW ttl.last_run AS
SELECT r.relid,
       r.table_name,
       r.run_id,
       r.worker,
       r.cutoff,
       r.started_at,
       r.finished_at,
       r.finished_at - r.started_at AS duration,
       r.status,
       t.rows_selected,
       t.rows_deleted,
       t.partitions_dropped::bigint AS partitions_dropped,
       t.partitions_detached::bigint AS partitions_detached,
       t.units::bigint AS units,
       t.units_not_ok::bigint AS units_not_ok,
       r.error
  FROM (SELECT DISTINCT ON (relid) * FROM ttl.run ORDER BY relid, run_id DESC) r
 CROSS JOIN LATERAL ttl._run_totals(r.run_id) t;

GRANT SELECT ON ttl.last_run TO PUBLIC;

-- Runs older than the history_retention setting go, except each table's latest.
-- SECURITY DEFINER: history rows are writable by their table's owners only
-- (row security), and retention is a global setting; it deletes nothing else.
CREATE OR REPLACE FUNCTION ttl.prune_history() RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n bigint;
BEGIN
    DELETE FROM ttl.run r
     WHERE r.started_at < now() - coalesce((SELECT s.value::interval FROM ttl.settings s
                                             WHERE s.name = 'history_retention'), interval '30 days')
       AND r.run_id <> (SELECT max(l.run_id) FROM ttl.run l WHERE l.relid = r.relid);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;

-- Runs whose server session is gone (killed worker, killed CALL ttl.run(),
-- server restart) are closed as 'interrupted', with their units and the sums
-- of what they did; their checkpoints stay for the next run to resume from.
-- Every pass calls it first. SECURITY DEFINER: the verdict rests on the
-- server's own session list, not on the caller; it closes nothing alive.
CREATE OR REPLACE FUNCTION ttl.close_dead_runs() RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n integer;
    dead record;
BEGIN
    n := 0;
    -- Most calls find no run going at all: skip planning the join with pg_stat_activity
    -- (2 ms in a new session; every pass starts with this call).
    IF NOT EXISTS (SELECT 1 FROM ttl.run r WHERE r.status = 'running') THEN
        RETURN 0;
    END IF;
    FOR dead IN
        SELECT r.run_id, r.error FROM ttl.run r
         WHERE r.status = 'running'
           AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                            WHERE a.pid = r.backend_pid AND a.backend_start IS NOT DISTINCT FROM r.backend_start)
           FOR UPDATE OF r SKIP LOCKED
    LOOP
        UPDATE ttl.run_unit u SET status = 'interrupted', finished_at = coalesce(u.finished_at, clock_timestamp())
         WHERE u.status = 'running' AND u.run_id = dead.run_id;
        UPDATE ttl.block_range o SET status = 'interrupted', finished_at = clock_timestamp()
         WHERE o.status = 'running' AND o.run_id = dead.run_id;
        PERFORM ttl._finish_run(dead.run_id, 'interrupted',
                                coalesce(dead.error, 'the session running it ended before it finished'));
        n := n + 1;
    END LOOP;
    RETURN n;
END
$fn$;

-- Is unit work `a` the same kind of work as `b`, on the same relation? Row
-- deletion (delete, drop, detach, a queue shard's drain) is one kind; orphan
-- deletion and archiving (tiers) keep apart checkpoints and "done" verdicts.
CREATE OR REPLACE FUNCTION ttl._same_work(a text, b text) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN a IN ('orphans', 'archive') OR b IN ('orphans', 'archive') THEN a = b ELSE true END
$fn$;

-- Take over a unit (the caller holds its claim): unfinished unit rows of
-- earlier runs are closed and the latest checkpoint among them is returned, to
-- resume from (NULL: start from the beginning). Runs with the caller's rights:
-- row security lets only the table's owners read-and-clear checkpoints.
-- Row deletion, orphan deletion and archiving keep apart checkpoints on the same unit.
CREATE OR REPLACE FUNCTION ttl.take_over_unit(unit oid, unit_action text) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    found jsonb;
BEGIN
    SELECT u.checkpoint INTO found FROM ttl.run_unit u
     WHERE u.unit_relid = unit AND u.checkpoint IS NOT NULL AND ttl._same_work(u.action, unit_action)
     ORDER BY u.run_id DESC LIMIT 1;
    UPDATE ttl.run_unit u SET status = CASE WHEN u.status = 'running' THEN 'interrupted' ELSE u.status END,
           finished_at = coalesce(u.finished_at, clock_timestamp()), checkpoint = NULL
     WHERE u.unit_relid = unit AND (u.status = 'running' OR u.checkpoint IS NOT NULL)
       AND ttl._same_work(u.action, unit_action);
    RETURN found;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl.take_over_unit(unit oid) RETURNS jsonb
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.take_over_unit(unit, 'delete')
$fn$;

-- Advisory lock key of a unit (ttl._begin_unit, CALL ttl.run()).
CREATE OR REPLACE FUNCTION ttl._claim_key(unit oid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (x'74746C00'::bigint << 32) | unit::bigint
$fn$;

-- Is a unit's claim for this work shared? Orphan units, and units of row expiry swept
-- in shared block ranges (strategy 'ranges'), share theirs: several runs split the
-- unit's ranges, each range claimed on its own (pg_ttl/expire/sweeps.py); other work
-- excludes them.
CREATE OR REPLACE FUNCTION ttl._claim_shared(unit_action text, strategy text) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT unit_action = 'orphans' OR strategy IS NOT DISTINCT FROM 'ranges'
$fn$;

-- The caller's claim on a unit released: shared (ttl._claim_shared) or not; NULL: as the
-- caller holds it (a unit that failed before its history row was written).
CREATE OR REPLACE FUNCTION ttl._release_claim(unit oid, shared boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF shared IS NULL THEN
        shared := EXISTS (SELECT 1 FROM pg_locks l
                           WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.mode = 'ShareLock'
                             AND l.objsubid = 1
                             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                             AND ((l.classid::int8 << 32) | l.objid::int8) = ttl._claim_key(unit));
    END IF;
    IF shared THEN
        PERFORM pg_advisory_unlock_shared(ttl._claim_key(unit));
    ELSE
        PERFORM pg_advisory_unlock(ttl._claim_key(unit));
    END IF;
END
$fn$;

-- A unit begins: claimed (a session advisory lock on its key), unless another
-- run holds it, a run with this very cutoff (workers sharing one scheduled
-- round pass the same one) already finished it under the current policy, or it
-- is gone. Returns NULL when the unit is the caller's (then, with `strategy`
-- given, its history row is started too), else the reason it was skipped
-- (recorded, the claim released). One statement per unit: thousands of
-- partitions, thousands of round trips less.
CREATE OR REPLACE FUNCTION ttl._begin_unit(run bigint, tbl oid, unit oid, unit_name text, unit_action text,
                                           run_cutoff timestamptz, strategy text DEFAULT NULL,
                                           start boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    done bigint;
    reason text;
    claimed boolean;
BEGIN
    IF ttl._claim_shared(unit_action, strategy) THEN
        claimed := pg_try_advisory_lock_shared(ttl._claim_key(unit));
    ELSE
        claimed := pg_try_advisory_lock(ttl._claim_key(unit));
    END IF;
    IF NOT claimed THEN
        reason := 'busy: another run is working on it';
    ELSE
        -- cutoff <= started_at: the (relid, started_at) index finds the candidate runs
        SELECT r.run_id INTO done FROM ttl.run r JOIN ttl.run_unit u ON u.run_id = r.run_id
         WHERE r.relid = tbl AND r.started_at >= run_cutoff AND r.cutoff = run_cutoff AND r.run_id <> run
           AND r.started_at >= CASE WHEN unit_action = 'orphans'
                                    THEN (SELECT o.updated_at FROM ttl.orphan_policy o WHERE o.relid = r.relid)
                                    ELSE coalesce((SELECT p.updated_at FROM ttl.policy p WHERE p.relid = r.relid),
                                                  (SELECT max(c.updated_at) FROM ttl.column_policy c
                                                    WHERE c.relid = r.relid))
                               END
           AND u.unit_relid = unit AND u.status = 'ok' AND u.action <> 'skip'
           AND ttl._same_work(u.action, unit_action)
         LIMIT 1;
        IF done IS NOT NULL THEN
            reason := format('done: run %s finished it for this cutoff', done);
        ELSIF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = unit) THEN
            reason := 'the partition was dropped during the run';
        ELSIF unit_action IN ('delete', 'archive', 'drop') AND unit <> tbl AND NOT EXISTS (
                -- (read from pg_inherits: no lock taken on a partition the application holds)
                WITH RECURSIVE up(oid) AS (
                    SELECT unit
                    UNION
                    SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.oid)
                SELECT 1 FROM up WHERE up.oid = tbl) THEN
            -- its rows are no longer the table's: the application detached it, or attached it
            -- to another table, since the run listed it
            reason := 'no longer a partition of the table: detached or attached elsewhere during the run';
        END IF;
        IF reason IS NOT NULL THEN
            PERFORM ttl._release_claim(unit, ttl._claim_shared(unit_action, strategy));
        END IF;
    END IF;
    IF reason IS NOT NULL THEN
        PERFORM ttl._skip_unit(run, unit, unit_name, reason);
    ELSIF start THEN
        PERFORM ttl._start_unit(run, unit, unit_name, unit_action, strategy, NULL);
    END IF;
    RETURN reason;
END
$fn$;

-- A unit ends: its history row finished (when `finish`), its claim released.
CREATE OR REPLACE FUNCTION ttl._end_unit(run bigint, unit oid, unit_status text, unit_error text,
                                         finish boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF finish THEN
        PERFORM ttl._finish_unit(run, unit, unit_status, unit_error);
    END IF;
    PERFORM ttl._release_claim(unit, (SELECT ttl._claim_shared(u.action, u.strategy)
                                        FROM ttl.run_unit u WHERE u.run_id = run AND u.unit_relid = unit));
END
$fn$;

-- A partition judged removable, locked and checked to be still that partition: still
-- attached to `parent` (not being detached) with the bound `bound` it was judged by.
-- The application may have detached it, attached it elsewhere or renamed it (and
-- given its name to another table) since: names are looked up by oid, and checked
-- again once the locks are held. `how`: 'drop' locks the parent (ONLY) and the
-- partition ACCESS EXCLUSIVE, in the order DROP and DETACH take them; 'partition' the
-- partition alone ACCESS EXCLUSIVE (the parent's writers go on while it is judged
-- again); 'export' the partition EXCLUSIVE NOWAIT (readers go on); 'check' takes no
-- lock. Returns the
-- names as they are; raises object_not_in_prerequisite_state when it changed.
CREATE OR REPLACE FUNCTION ttl._lock_partition(part oid, parent oid, bound text, how text,
                                               OUT nsp name, OUT rel name, OUT parent_nsp name,
                                               OUT parent_rel name)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    same boolean;
    was text[];
BEGIN
    IF how NOT IN ('drop', 'partition', 'export', 'check') THEN
        RAISE EXCEPTION 'ttl._lock_partition: unknown lock %', how;
    END IF;
    FOR i IN 1 .. 2 LOOP
        was := ARRAY[nsp, rel, parent_nsp, parent_rel];
        SELECT n.nspname, c.relname, pn.nspname, pc.relname,
               h.inhparent = parent AND NOT h.inhdetachpending AND pg_get_expr(c.relpartbound, 0) = bound
          INTO nsp, rel, parent_nsp, parent_rel, same
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_inherits h ON h.inhrelid = c.oid
          LEFT JOIN pg_class pc ON pc.oid = h.inhparent
          LEFT JOIN pg_namespace pn ON pn.oid = pc.relnamespace
         WHERE c.oid = part;
        IF rel IS NULL THEN
            RAISE EXCEPTION 'partition % was dropped during the run', part USING ERRCODE = 'undefined_table';
        END IF;
        -- (the second look, under the locks: a rename just before them shows here)
        IF NOT coalesce(same, false) OR (i = 2 AND ARRAY[nsp, rel, parent_nsp, parent_rel]::text[] <> was) THEN
            RAISE EXCEPTION 'partition % was detached, attached elsewhere, renamed or given another bound '
                            'since this run found it expired: kept', format('%I.%I', nsp, rel)
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        EXIT WHEN i = 2 OR how = 'check';
        IF how = 'drop' THEN
            EXECUTE format('LOCK TABLE ONLY %I.%I IN ACCESS EXCLUSIVE MODE', parent_nsp, parent_rel);
            EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', nsp, rel);
        ELSIF how = 'partition' THEN
            EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', nsp, rel);
        ELSE
            EXECUTE format('LOCK TABLE %I.%I IN EXCLUSIVE MODE NOWAIT', nsp, rel);
        END IF;
    END LOOP;
END
$fn$;

-- Several expired partitions of one table dropped by one DROP TABLE, in one
-- statement: each claimed and recorded as ttl._begin_unit does (or skipped, with
-- the reason), the claimed ones dropped together under the engine's timeouts, then
-- each ended. Returns one row per unit: reason NULL when dropped, the reason when
-- skipped, 'retry' when the DROP failed (a lock, a partition gone meanwhile): then
-- nothing of the batch is recorded or held, and the engine drops those one by one
-- (pg_ttl/expire/partitions.py). Runs with the caller's rights (the table's owner).
CREATE OR REPLACE FUNCTION ttl._drop_units(run bigint, tbl oid, units oid[], unit_names text[],
                                           run_cutoff timestamptz, lock_t text, statement_t text,
                                           caller_search_path text)
RETURNS TABLE (unit oid, reason text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    claimed oid[] := '{}';
    targets text[] := '{}';
    skip text;
    u oid;
BEGIN
    PERFORM set_config('lock_timeout', lock_t, true), set_config('statement_timeout', statement_t, true);
    FOR i IN 1 .. cardinality(units) LOOP
        skip := ttl._begin_unit(run, tbl, units[i], unit_names[i], 'drop', run_cutoff, NULL, true);
        IF skip IS NULL THEN
            claimed := claimed || units[i];
            targets := targets || ttl._qualified(units[i]);
        ELSE
            unit := units[i]; reason := skip;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF cardinality(claimed) = 0 THEN
        RETURN;
    END IF;
    BEGIN
        -- The DROP (and the event triggers it fires) sees the search_path it sees when the
        -- engine drops a partition on its own: the table's (pg_catalog first).
        PERFORM set_config('search_path', caller_search_path, true);
        EXECUTE 'DROP TABLE ' || array_to_string(targets, ', ');
        PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    EXCEPTION WHEN OTHERS THEN
        -- Undo this batch's records and claims: the engine takes these one by one.
        DELETE FROM ttl.run_unit r WHERE r.run_id = run AND r.unit_relid = ANY(claimed);
        FOREACH u IN ARRAY claimed LOOP
            PERFORM ttl._release_claim(u, false);
            unit := u; reason := 'retry';
            RETURN NEXT;
        END LOOP;
        RETURN;
    END;
    FOREACH u IN ARRAY claimed LOOP
        PERFORM ttl._end_unit(run, u, 'ok', NULL, true);
        unit := u; reason := NULL;
        RETURN NEXT;
    END LOOP;
END
$fn$;
