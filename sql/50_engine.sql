-- The expiration engine's server side: a last-run-per-table view, history
-- retention, and ttl.run(): one expiration pass from psql or pg_cron.
-- (pg-ttl run / the worker do the same from Python, plus whole-partition
-- removal; the two share ttl.run / ttl.run_unit and the per-unit claims.)

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
    FOR dead IN
        SELECT r.run_id, r.error FROM ttl.run r
         WHERE r.status = 'running'
           AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                            WHERE a.pid = r.backend_pid AND a.backend_start IS NOT DISTINCT FROM r.backend_start)
           FOR UPDATE OF r SKIP LOCKED
    LOOP
        UPDATE ttl.run_unit u SET status = 'interrupted', finished_at = coalesce(u.finished_at, clock_timestamp())
         WHERE u.status = 'running' AND u.run_id = dead.run_id;
        PERFORM ttl._finish_run(dead.run_id, 'interrupted',
                                coalesce(dead.error, 'the session running it ended before it finished'));
        n := n + 1;
    END LOOP;
    RETURN n;
END
$fn$;

-- Take over a unit (the caller holds its claim): unfinished unit rows of
-- earlier runs are closed and the latest checkpoint among them is returned, to
-- resume from (NULL: start from the beginning). Runs with the caller's rights:
-- row security lets only the table's owners read-and-clear checkpoints.
CREATE OR REPLACE FUNCTION ttl.take_over_unit(unit oid) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    found jsonb;
BEGIN
    SELECT u.checkpoint INTO found FROM ttl.run_unit u
     WHERE u.unit_relid = unit AND u.checkpoint IS NOT NULL
     ORDER BY u.run_id DESC LIMIT 1;
    UPDATE ttl.run_unit u SET status = CASE WHEN u.status = 'running' THEN 'interrupted' ELSE u.status END,
           finished_at = coalesce(u.finished_at, clock_timestamp()), checkpoint = NULL
     WHERE u.unit_relid = unit AND (u.status = 'running' OR u.checkpoint IS NOT NULL);
    RETURN found;
END
$fn$;

-- Advisory lock key of a unit, the same as pg_ttl.expire.claims.key().
CREATE OR REPLACE FUNCTION ttl._claim_key(unit oid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (x'74746C00'::bigint << 32) | unit::bigint
$fn$;

-- One expiration pass, server side, for pg_cron:
--     CALL ttl.run();              -- every policy whose table the caller may act for
--     CALL ttl.run('events');      -- one table
-- Deletes row by row by ctid block ranges (delete_batch_size rows per
-- transaction, COMMIT in between), re-checking expiry in every statement;
-- a range that meets a row lock is redone with FOR UPDATE SKIP LOCKED.
-- Every transaction runs as the table's owner (SET LOCAL ROLE), so the owner's
-- expressions and triggers never run with the caller's rights; tables whose
-- owner the caller is not a member of are left alone (a WARNING names them).
-- A unit resumes from the checkpoint an interrupted run left (this procedure's
-- or pg-ttl's, ctid ranges). A lock held on one partition fails only that unit.
-- Whole-partition drop/detach is done by pg-ttl run / the worker only.
-- Must be called outside an explicit transaction block (it commits).
-- No SET clause: a procedure with one cannot COMMIT; settings it needs are
-- set for the session and put back at the end.
CREATE OR REPLACE PROCEDURE ttl.run(tbl regclass DEFAULT NULL, cutoff timestamptz DEFAULT NULL)
LANGUAGE plpgsql
AS $fn$
DECLARE
    old_path text := pg_catalog.current_setting('search_path');
    old_tz text := pg_catalog.current_setting('TimeZone');
    old_lock text := pg_catalog.current_setting('lock_timeout');
    old_stmt text := pg_catalog.current_setting('statement_timeout');
    lock_t text;
    row_lock_t text;
    p record;
    leaf record;
    pred text;
    run bigint;
    cp jsonb;
    nblocks bigint;
    step bigint;
    b bigint;
    n bigint;
    unit_status text;
    unit_error text;
    group_start timestamptz;
    group_n bigint;
    unit_start timestamptz;
    unit_n bigint;
    rate bigint;
    max_step bigint;
BEGIN
    -- A procedure that COMMITs cannot have a SET clause: pin search_path first thing.
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'this server is a standby (pg_is_in_recovery() is true): pg_ttl expires rows only on the primary'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF tbl IS NOT NULL THEN
        -- Checked before anything is recorded: a refused call leaves no trace.
        IF NOT EXISTS (SELECT 1 FROM ttl.policy WHERE relid = tbl) THEN
            RAISE EXCEPTION 'table % has no TTL policy', tbl USING ERRCODE = 'undefined_object',
                HINT = 'Enable one with ttl.enable().';
        END IF;
        IF NOT pg_catalog.pg_has_role(current_user, (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl),
                                      'MEMBER') THEN
            RAISE EXCEPTION 'must be a member of the owner of table % to expire its rows', tbl
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'The engine acts as the table''s owner; run it as the owner or a member of its role.';
        END IF;
    END IF;
    IF cutoff IS NULL THEN
        cutoff := pg_catalog.now();  -- once per run
    ELSIF cutoff > pg_catalog.now() THEN
        RAISE EXCEPTION 'cutoff % is later than the server clock: rows would go early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl.close_dead_runs();
    SELECT value INTO lock_t FROM ttl.settings WHERE name = 'lock_timeout';
    SELECT value INTO row_lock_t FROM ttl.settings WHERE name = 'row_lock_timeout';
    PERFORM pg_catalog.set_config('TimeZone', 'UTC', false),
            pg_catalog.set_config('lock_timeout', coalesce(lock_t, '1s'), false),
            pg_catalog.set_config('statement_timeout',
                                  coalesce((SELECT value FROM ttl.settings WHERE name = 'statement_timeout'), '30s'),
                                  false);
    COMMIT;
    -- names as the Python engine records them: schema-qualified outside public
    FOR p IN SELECT po.relid, po.paused, po.delete_batch_size, po.select_batch_size, po.delete_rate_limit,
                    po.select_rate_limit, c.relkind, n.nspname,
                    pg_catalog.pg_get_userbyid(c.relowner) AS owner,
                    CASE WHEN n.nspname = 'public' THEN c.relname::text ELSE n.nspname || '.' || c.relname END AS name
               FROM ttl.policy po
               JOIN pg_catalog.pg_class c ON c.oid = po.relid
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE tbl IS NULL OR po.relid = tbl
              ORDER BY n.nspname, c.relname
    LOOP
        IF NOT pg_catalog.pg_has_role(current_user, p.owner, 'MEMBER') THEN
            RAISE WARNING 'table % skipped: % is not a member of its owner %', p.name, current_user, p.owner
                USING HINT = 'Run ttl.run() as the owner, or GRANT the owner role to this one.';
            CONTINUE;
        END IF;
        -- Every transaction below acts as the owner (a local setting: a COMMIT or
        -- an error ends it, so the caller's session never keeps the owner's role).
        PERFORM pg_catalog.set_config('role', p.owner, true);
        IF p.paused THEN
            INSERT INTO ttl.run (relid, table_name, worker, cutoff, status, error, finished_at)
            VALUES (p.relid, p.name, 'ttl.run()', cutoff, 'paused',
                    format('paused (SELECT ttl.resume(%L) to resume)', p.name), pg_catalog.clock_timestamp());
            COMMIT;
            CONTINUE;
        END IF;
        SELECT e.expired INTO pred FROM ttl.expired_sql(p.relid, cutoff) e;
        INSERT INTO ttl.run (relid, table_name, worker, cutoff) VALUES (p.relid, p.name, 'ttl.run()', cutoff)
        RETURNING run_id INTO run;
        COMMIT;
        -- The leaves, read from pg_inherits: pg_partition_tree() would lock every
        -- partition, and wait on one an application holds.
        FOR leaf IN WITH RECURSIVE tree(oid) AS (
                        SELECT p.relid
                        UNION ALL
                        SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
                    SELECT c.oid, format('%I.%I', n.nspname, c.relname) AS rel,
                           CASE WHEN n.nspname = 'public' THEN c.relname::text
                                ELSE n.nspname || '.' || c.relname END AS name
                      FROM tree
                      JOIN pg_catalog.pg_class c ON c.oid = tree.oid
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.relkind = 'r'
                     ORDER BY c.relname
        LOOP
            PERFORM pg_catalog.set_config('role', p.owner, true);
            IF NOT pg_catalog.pg_try_advisory_lock(ttl._claim_key(leaf.oid)) THEN
                PERFORM ttl._skip_unit(run, leaf.oid, leaf.name, 'busy: another run is working on it');
                COMMIT;
                CONTINUE;
            END IF;
            unit_status := 'ok';
            unit_error := NULL;
            cp := ttl.take_over_unit(leaf.oid);
            IF cp->>'strategy' IS DISTINCT FROM 'ctid' THEN
                cp := NULL;  -- key ranges are pg-ttl's; block ranges start over from block 0
            END IF;
            PERFORM ttl._start_unit(run, leaf.oid, leaf.name, 'delete', 'ctid', cp);
            COMMIT;
            PERFORM pg_catalog.set_config('role', p.owner, true);
            BEGIN
                -- waits for a lock on the partition no longer than lock_timeout
                nblocks := pg_catalog.pg_relation_size(leaf.oid) / pg_catalog.current_setting('block_size')::bigint;
                -- first range: delete_batch_size rows' worth of blocks; never more than
                -- select_batch_size rows' worth, whatever the density seen so far
                SELECT greatest(1, ceil(p.delete_batch_size / d.per_block))::bigint,
                       greatest(1, ceil(p.select_batch_size / d.per_block))::bigint
                  INTO step, max_step
                  FROM pg_catalog.pg_class c,
                       LATERAL (SELECT CASE WHEN c.relpages > 0 AND c.reltuples > 0
                                            THEN c.reltuples / c.relpages ELSE 100 END AS per_block) d
                 WHERE c.oid = leaf.oid;
            EXCEPTION WHEN lock_not_available OR query_canceled THEN
                unit_status := 'timeout';
                unit_error := SQLERRM;
            END;
            b := coalesce(pg_catalog.split_part(pg_catalog.btrim(cp->>'from', '()'), ',', 1)::bigint, 0);
            IF cp IS NOT NULL THEN
                nblocks := least(nblocks, (cp->>'end')::bigint);  -- rows that arrived since are the next run's
            END IF;
            -- Names in the expression resolve in pg_catalog first, then the table's schema.
            PERFORM pg_catalog.set_config('search_path', ttl._table_search_path(p.relid), false);
            -- Ranges are grouped into transactions of about 50 ms (as the Python
            -- engine does), each committed with one update of the unit's counters
            -- and checkpoint; a rate limit makes every range its own transaction
            -- and waits between transactions. A range is sized from the expired
            -- rows the last one held, toward delete_batch_size of them.
            group_start := pg_catalog.clock_timestamp();
            group_n := 0;
            unit_start := group_start;
            unit_n := 0;
            rate := CASE WHEN p.delete_rate_limit > 0 AND p.select_rate_limit > 0
                         THEN least(p.delete_rate_limit, p.select_rate_limit)
                         ELSE greatest(p.delete_rate_limit, p.select_rate_limit) END;
            WHILE unit_status = 'ok' AND b < coalesce(nblocks, 0) LOOP
                PERFORM pg_catalog.set_config('role', p.owner, true);
                BEGIN
                    PERFORM pg_catalog.set_config('lock_timeout', coalesce(row_lock_t, '50ms'), true);
                    EXECUTE format('WITH d AS (DELETE FROM ONLY %s WHERE ctid >= %L::tid AND ctid < %L::tid AND %s'
                                   ' RETURNING 1) SELECT count(*) FROM d',
                                   leaf.rel, format('(%s,0)', b), format('(%s,0)', b + step), pred) INTO n;
                EXCEPTION WHEN lock_not_available OR serialization_failure THEN
                    -- an application holds a row (or moved it to another partition meanwhile):
                    -- redo the range without waiting on row locks; locked rows wait for the next run
                    BEGIN
                        PERFORM pg_catalog.set_config('lock_timeout', coalesce(lock_t, '1s'), true);
                        EXECUTE format('WITH d AS (DELETE FROM ONLY %1$s WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY %1$s'
                                       ' WHERE ctid >= %2$L::tid AND ctid < %3$L::tid AND %4$s FOR UPDATE SKIP LOCKED))'
                                       ' AND %4$s RETURNING 1) SELECT count(*) FROM d',
                                       leaf.rel, format('(%s,0)', b), format('(%s,0)', b + step), pred) INTO n;
                    EXCEPTION WHEN serialization_failure THEN
                        n := 0;  -- moved again meanwhile: left for the next run
                        unit_error := 'rows moved to another partition during the run were left for the next run';
                    WHEN lock_not_available OR query_canceled THEN
                        unit_status := 'timeout';
                        unit_error := SQLERRM;
                    WHEN undefined_table THEN
                        unit_status := 'skipped';
                        unit_error := 'the partition was dropped during the run';
                    END;
                WHEN query_canceled THEN
                    unit_status := 'timeout';
                    unit_error := SQLERRM;
                WHEN undefined_table THEN
                    unit_status := 'skipped';
                    unit_error := 'the partition was dropped during the run';
                END;
                EXIT WHEN unit_status <> 'ok';
                b := b + step;
                group_n := group_n + n;
                unit_n := unit_n + n;
                step := greatest(1, least(max_step, step * 4, (step * p.delete_batch_size) / greatest(n, 1)));
                IF rate > 0 OR b >= nblocks
                   OR pg_catalog.clock_timestamp() - group_start >= interval '50 milliseconds' THEN
                    UPDATE ttl.run_unit SET rows_selected = rows_selected + group_n,
                           rows_deleted = rows_deleted + group_n,
                           checkpoint = jsonb_build_object('strategy', 'ctid', 'from', format('(%s,0)', b),
                                                           'end', nblocks)
                     WHERE run_id = run AND unit_relid = leaf.oid;
                    COMMIT;
                    group_n := 0;
                    IF rate > 0 THEN
                        -- between transactions: the rows so far at `rate` rows/s
                        PERFORM pg_catalog.pg_sleep(greatest(0, unit_n::float8 / rate - extract(epoch FROM
                                                    pg_catalog.clock_timestamp() - unit_start)));
                    END IF;
                    group_start := pg_catalog.clock_timestamp();
                END IF;
            END LOOP;
            IF group_n > 0 THEN
                -- ranges deleted before the one that stopped the unit: counted, with their checkpoint
                PERFORM pg_catalog.set_config('role', p.owner, true);
                UPDATE ttl.run_unit SET rows_selected = rows_selected + group_n, rows_deleted = rows_deleted + group_n,
                       checkpoint = jsonb_build_object('strategy', 'ctid', 'from', format('(%s,0)', b), 'end', nblocks)
                 WHERE run_id = run AND unit_relid = leaf.oid;
            END IF;
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false),
                    pg_catalog.set_config('role', p.owner, true);
            PERFORM ttl._finish_unit(run, leaf.oid, unit_status, unit_error);
            PERFORM pg_catalog.pg_advisory_unlock(ttl._claim_key(leaf.oid));
            COMMIT;
        END LOOP;
        PERFORM pg_catalog.set_config('role', p.owner, true);
        PERFORM ttl._finish_run(run, NULL, NULL);
        COMMIT;
    END LOOP;
    PERFORM ttl.prune_history();
    PERFORM pg_catalog.set_config('search_path', old_path, false),
            pg_catalog.set_config('TimeZone', old_tz, false),
            pg_catalog.set_config('lock_timeout', old_lock, false),
            pg_catalog.set_config('statement_timeout', old_stmt, false);
END
$fn$;
