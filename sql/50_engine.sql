-- The expiration engine's server side: a last-run-per-table view, history
-- retention, and ttl.run(): one expiration pass from psql or pg_cron.
-- (pg-ttl run / the worker do the same from Python, plus whole-partition
-- removal; the two share ttl.run / ttl.run_unit and the per-unit claims.)

-- The last run of every table, with the sums of its units (exact even for a
-- run that was killed: unit counters commit with the rows they count).
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
       coalesce(u.rows_selected, 0)       AS rows_selected,
       coalesce(u.rows_deleted, 0)        AS rows_deleted,
       coalesce(u.partitions_dropped, 0)  AS partitions_dropped,
       coalesce(u.partitions_detached, 0) AS partitions_detached,
       coalesce(u.units, 0)               AS units,
       coalesce(u.units_not_ok, 0)        AS units_not_ok,
       r.error
  FROM (SELECT DISTINCT ON (relid) * FROM ttl.run ORDER BY relid, run_id DESC) r
  LEFT JOIN LATERAL (
        SELECT sum(x.rows_selected)::bigint AS rows_selected, sum(x.rows_deleted)::bigint AS rows_deleted,
               count(*) FILTER (WHERE x.action = 'drop' AND x.status = 'ok') AS partitions_dropped,
               count(*) FILTER (WHERE x.action = 'detach' AND x.status = 'ok') AS partitions_detached,
               count(*) AS units,
               count(*) FILTER (WHERE x.status <> 'ok') AS units_not_ok
          FROM ttl.run_unit x WHERE x.run_id = r.run_id) u ON true;

GRANT SELECT ON ttl.last_run TO PUBLIC;

-- Runs older than the history_retention setting go, except each table's latest.
CREATE OR REPLACE FUNCTION ttl.prune_history() RETURNS bigint
LANGUAGE plpgsql
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

-- Advisory lock key of a unit, the same as pg_ttl.expire.claims.key().
CREATE OR REPLACE FUNCTION ttl._claim_key(unit oid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (x'74746C00'::bigint << 32) | unit::bigint
$fn$;

-- The expiry predicate of a policy at a cutoff, as SQL text over the table's
-- columns; the same rules as pg_ttl/expire/predicate.py. Must run with
-- TimeZone = UTC (ttl.run sets it).
CREATE OR REPLACE FUNCTION ttl._expired_sql(tbl oid, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    col name;
    typ regtype;
    months boolean;
    point timestamptz;
    scale numeric;
    thr text;
    cmp_type text;
    base text;
    pred text;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p.expiration_expression IS NOT NULL THEN
        RETURN format('((%s) <= %L::timestamptz)', p.expiration_expression, cutoff);
    END IF;
    SELECT a.attname, a.atttypid::regtype INTO col, typ
      FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum = p.ttl_attnum AND NOT a.attisdropped;
    months := extract(month FROM p.expire_after) <> 0 OR extract(year FROM p.expire_after) <> 0;
    -- with months, a bound widened by the longest month-end clamp, then the exact sum
    point := cutoff - p.expire_after + CASE WHEN months THEN interval '3 days' ELSE interval '0' END;
    scale := CASE p.unit WHEN 'milliseconds' THEN 1000 WHEN 'microseconds' THEN 1000000
                         WHEN 'nanoseconds' THEN 1000000000 ELSE 1 END;
    CASE typ
        WHEN 'timestamptz'::regtype THEN
            thr := point::text; cmp_type := 'timestamptz'; base := format('%I', col);
        WHEN 'timestamp'::regtype THEN
            thr := (point AT TIME ZONE 'UTC')::text; cmp_type := 'timestamp';
            base := format('(%I AT TIME ZONE ''UTC'')', col);
        WHEN 'date'::regtype THEN
            thr := ((point AT TIME ZONE 'UTC')::date)::text; cmp_type := 'date';
            base := format('(%I::timestamp AT TIME ZONE ''UTC'')', col);
        WHEN 'numeric'::regtype THEN
            thr := (extract(epoch FROM point) * scale)::text; cmp_type := 'numeric';
            base := format('to_timestamp(%I::numeric / %s)', col, scale);
        ELSE
            thr := floor(extract(epoch FROM point) * scale)::bigint::text; cmp_type := 'bigint';
            base := format('to_timestamp(%I::numeric / %s)', col, scale);
    END CASE;
    pred := format('%I <= %L::%s', col, thr, cmp_type);
    IF months THEN
        pred := format('(%s AND %s + %L::interval <= %L::timestamptz)', pred, base, p.expire_after, cutoff);
    END IF;
    RETURN pred;
END
$fn$;

-- One expiration pass, server side, for pg_cron:
--     CALL ttl.run();              -- every policy
--     CALL ttl.run('events');      -- one table
-- Deletes row by row by ctid block ranges (delete_batch_size rows per
-- transaction, COMMIT in between), re-checking expiry in every statement;
-- a range that meets a row lock is redone with FOR UPDATE SKIP LOCKED.
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
    nblocks bigint;
    step bigint;
    b bigint;
    n bigint;
    unit_status text;
    unit_error text;
BEGIN
    -- A procedure that COMMITs cannot have a SET clause: pin search_path first thing.
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'this server is a standby (pg_is_in_recovery() is true): pg_ttl expires rows only on the primary'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    IF cutoff IS NULL THEN
        cutoff := pg_catalog.now();  -- once per run
    ELSIF cutoff > pg_catalog.now() THEN
        RAISE EXCEPTION 'cutoff % is later than the server clock: rows would go early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT value INTO lock_t FROM ttl.settings WHERE name = 'lock_timeout';
    SELECT value INTO row_lock_t FROM ttl.settings WHERE name = 'row_lock_timeout';
    PERFORM pg_catalog.set_config('TimeZone', 'UTC', false),
            pg_catalog.set_config('statement_timeout',
                                  coalesce((SELECT value FROM ttl.settings WHERE name = 'statement_timeout'), '30s'),
                                  false);
    -- names as the Python engine records them: schema-qualified outside public
    FOR p IN SELECT po.relid, po.paused, po.delete_batch_size, c.relkind, n.nspname,
                    CASE WHEN n.nspname = 'public' THEN c.relname::text ELSE n.nspname || '.' || c.relname END AS name
               FROM ttl.policy po
               JOIN pg_catalog.pg_class c ON c.oid = po.relid
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE tbl IS NULL OR po.relid = tbl
              ORDER BY n.nspname, c.relname
    LOOP
        IF p.paused THEN
            INSERT INTO ttl.run (relid, table_name, worker, cutoff, status, error, finished_at)
            VALUES (p.relid, p.name, 'ttl.run()', cutoff, 'paused',
                    format('paused (SELECT ttl.resume(%L) to resume)', p.name), pg_catalog.clock_timestamp());
            COMMIT;
            CONTINUE;
        END IF;
        pred := ttl._expired_sql(p.relid, cutoff);
        -- an expression resolves names in the table's schema first, as validated
        PERFORM pg_catalog.set_config('search_path', format('%I, pg_catalog, pg_temp', p.nspname), false);
        INSERT INTO ttl.run (relid, table_name, worker, cutoff) VALUES (p.relid, p.name, 'ttl.run()', cutoff)
        RETURNING run_id INTO run;
        COMMIT;
        FOR leaf IN SELECT c.oid, c.oid::regclass AS rel,
                           CASE WHEN n.nspname = 'public' THEN c.relname::text
                                ELSE n.nspname || '.' || c.relname END AS name
                      FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.relkind = 'r'
                       AND (c.oid = p.relid OR c.oid IN (SELECT t.relid FROM pg_catalog.pg_partition_tree(p.relid) t
                                                          WHERE t.isleaf))
        LOOP
            IF NOT pg_catalog.pg_try_advisory_lock(ttl._claim_key(leaf.oid)) THEN
                INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, status, error, finished_at)
                VALUES (run, leaf.oid, leaf.name, 'skip', 'skipped', 'busy: another run is working on it',
                        pg_catalog.clock_timestamp());
                COMMIT;
                CONTINUE;
            END IF;
            -- units of dead runs: mark them interrupted (the Python engine also resumes them)
            UPDATE ttl.run_unit SET status = 'interrupted', checkpoint = NULL,
                   finished_at = coalesce(finished_at, pg_catalog.clock_timestamp())
             WHERE unit_relid = leaf.oid AND (status = 'running' OR checkpoint IS NOT NULL);
            INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, strategy)
            VALUES (run, leaf.oid, leaf.name, 'delete', 'ctid');
            COMMIT;
            nblocks := pg_catalog.pg_relation_size(leaf.oid) / pg_catalog.current_setting('block_size')::bigint;
            SELECT greatest(1, ceil(p.delete_batch_size / CASE WHEN c.relpages > 0 AND c.reltuples > 0
                                                           THEN c.reltuples / c.relpages ELSE 100 END))::bigint
              INTO step FROM pg_catalog.pg_class c WHERE c.oid = leaf.oid;
            b := 0;
            unit_status := 'ok';
            unit_error := NULL;
            WHILE b < nblocks LOOP
                BEGIN
                    PERFORM pg_catalog.set_config('lock_timeout', coalesce(row_lock_t, '50ms'), true);
                    EXECUTE format('WITH d AS (DELETE FROM ONLY %s WHERE ctid >= %L::tid AND ctid < %L::tid AND %s'
                                   ' RETURNING 1) SELECT count(*) FROM d',
                                   leaf.rel, format('(%s,0)', b), format('(%s,0)', b + step), pred) INTO n;
                EXCEPTION WHEN lock_not_available THEN
                    BEGIN
                        PERFORM pg_catalog.set_config('lock_timeout', coalesce(lock_t, '1s'), true);
                        EXECUTE format('WITH d AS (DELETE FROM ONLY %1$s WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY %1$s'
                                       ' WHERE ctid >= %2$L::tid AND ctid < %3$L::tid AND %4$s FOR UPDATE SKIP LOCKED))'
                                       ' AND %4$s RETURNING 1) SELECT count(*) FROM d',
                                       leaf.rel, format('(%s,0)', b), format('(%s,0)', b + step), pred) INTO n;
                    EXCEPTION WHEN lock_not_available OR query_canceled THEN
                        unit_status := 'timeout';
                        unit_error := SQLERRM;
                    END;
                WHEN query_canceled THEN
                    unit_status := 'timeout';
                    unit_error := SQLERRM;
                END;
                EXIT WHEN unit_status <> 'ok';
                UPDATE ttl.run_unit SET rows_selected = rows_selected + n, rows_deleted = rows_deleted + n,
                       checkpoint = jsonb_build_object('strategy', 'ctid', 'from', format('(%s,0)', b + step),
                                                       'end', nblocks)
                 WHERE run_id = run AND unit_relid = leaf.oid;
                COMMIT;
                b := b + step;
            END LOOP;
            UPDATE ttl.run_unit SET status = unit_status, error = unit_error,
                   finished_at = pg_catalog.clock_timestamp(),
                   checkpoint = CASE WHEN unit_status = 'ok' THEN NULL ELSE checkpoint END
             WHERE run_id = run AND unit_relid = leaf.oid;
            PERFORM pg_catalog.pg_advisory_unlock(ttl._claim_key(leaf.oid));
            COMMIT;
        END LOOP;
        UPDATE ttl.run r SET finished_at = pg_catalog.clock_timestamp(),
               status = CASE WHEN u.failed > 0 THEN 'failed' WHEN u.n > 0 AND u.skipped = u.n THEN 'busy'
                             WHEN u.not_ok > 0 THEN 'partial' ELSE 'ok' END,
               rows_selected = u.sel, rows_deleted = u.del
          FROM (SELECT count(*) AS n, count(*) FILTER (WHERE status = 'failed') AS failed,
                       count(*) FILTER (WHERE status = 'skipped') AS skipped,
                       count(*) FILTER (WHERE status <> 'ok') AS not_ok,
                       coalesce(sum(rows_selected), 0) AS sel, coalesce(sum(rows_deleted), 0) AS del
                  FROM ttl.run_unit WHERE run_id = run) u
         WHERE r.run_id = run;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
        COMMIT;
    END LOOP;
    PERFORM ttl.prune_history();
    PERFORM pg_catalog.set_config('search_path', old_path, false),
            pg_catalog.set_config('TimeZone', old_tz, false),
            pg_catalog.set_config('lock_timeout', old_lock, false),
            pg_catalog.set_config('statement_timeout', old_stmt, false);
END
$fn$;
