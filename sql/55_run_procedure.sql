-- How CALL ttl.run() records a unit that an error stopped: lock_timeout ('timeout'),
-- the partition dropped meanwhile ('skipped'), a cancel or the CALL's own
-- statement_timeout ('interrupted': the CALL stops there), any other error ('failed',
-- and the CALL goes on with the next unit); with the server's message.
CREATE OR REPLACE FUNCTION ttl._unit_failure(state text, message text, OUT status text, OUT error text)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE state WHEN '42P01' THEN 'skipped' WHEN '55P03' THEN 'timeout'
                      WHEN '57014' THEN 'interrupted' ELSE 'failed' END,
           CASE WHEN state = '42P01' THEN 'the partition was dropped during the run' ELSE message END
$fn$;

-- One expiration pass, server side, for pg_cron:
--     CALL ttl.run();              -- every policy whose table the caller may act for
--     CALL ttl.run('events');      -- one table
-- A thin driver over the engine's SQL primitives: the unit claim, checkpoint
-- take-over and history functions (sql/50_history.sql), the choice between key
-- windows over a btree on the TTL column and block ranges that pg-ttl run and
-- the worker make too (ttl.row_strategy), the block range DELETE they execute
-- too (ttl.delete_rows_sql) and key windows shaped and sized as theirs, a key of
-- many rows in ctid windows (ttl.window_sql, ttl.key_window_sql, ttl.window_rows,
-- ttl.key_window_slots; all in sql/52_delete_rows.sql); COMMITs in between; a
-- range that meets a row lock is redone with FOR UPDATE SKIP LOCKED.
-- Every transaction runs as the table's owner (SET LOCAL ROLE), so the owner's
-- expressions and triggers never run with the caller's rights; tables whose
-- owner the caller is not a member of are left alone (a WARNING names them).
-- A unit resumes from the checkpoint an interrupted run left (this procedure's
-- or pg-ttl's: key windows, a key's ctid windows or block ranges). A lock held on
-- one partition fails only that unit.
-- Whole-partition drop/detach is done by pg-ttl run / the worker only.
-- An error in a unit is recorded on it and the CALL goes on; a cancel, or the
-- statement_timeout of the session that CALLs it (PostgreSQL times the whole
-- CALL: the statement_timeout setting of ttl.settings cannot apply inside it),
-- ends the unit 'interrupted' with its checkpoint and the CALL with that error.
-- Must be called outside an explicit transaction block (it commits).
-- No SET clause: a procedure with one cannot COMMIT; settings it needs are
-- set for the session and put back at the end (keys are read and written as
-- text, so DateStyle and extra_float_digits are pinned as pg-ttl's session's).
CREATE OR REPLACE PROCEDURE ttl.run(tbl regclass DEFAULT NULL, cutoff timestamptz DEFAULT NULL)
LANGUAGE plpgsql
AS $fn$
DECLARE
    old_path text := pg_catalog.current_setting('search_path');
    old_tz text := pg_catalog.current_setting('TimeZone');
    old_lock text := pg_catalog.current_setting('lock_timeout');
    old_ds text := pg_catalog.current_setting('DateStyle');
    old_digits text := pg_catalog.current_setting('extra_float_digits');
    lock_t text;
    row_lock_t text;
    p record;
    leaf record;
    del_sql text;
    skip_sql text;
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
    forced text;
    strategy text;
    chosen text;
    end_sql text;
    opening_end_sql text;
    opening_del_sql text;
    opening_skip_sql text;
    k text;
    e text;
    win bigint;
    lo text;
    hi text;
    per_block float8;
    slots integer;
    key_rows_sql text;
    key_sql text;
    key_skip_sql text;
    next_sql text;
    tie_key text;
    tie_pos bigint;
    tie_end bigint;
    tie_span bigint;
    hi_pos bigint;
    first_tid text;
    last_tid text;
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
    SELECT value INTO forced FROM ttl.settings WHERE name = 'row_strategy';
    PERFORM pg_catalog.set_config('TimeZone', 'UTC', false),
            pg_catalog.set_config('DateStyle', 'ISO, YMD', false),
            pg_catalog.set_config('extra_float_digits', '1', false),
            pg_catalog.set_config('lock_timeout', coalesce(lock_t, '1s'), false);
    COMMIT;
    unit_status := NULL;
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
            PERFORM ttl._start_run(p.relid, p.name, 'ttl.run()', cutoff, 'paused',
                                   format('paused (SELECT ttl.resume(%L) to resume)', p.name), finished => true);
            COMMIT;
            CONTINUE;
        END IF;
        run := ttl._start_run(p.relid, p.name, 'ttl.run()', cutoff);
        COMMIT;
        -- The leaves, read from pg_inherits: pg_partition_tree() would lock every
        -- partition, and wait on one an application holds.
        FOR leaf IN WITH RECURSIVE tree(oid) AS (
                        SELECT p.relid
                        UNION ALL
                        SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
                    SELECT c.oid,
                           CASE WHEN n.nspname = 'public' THEN c.relname::text
                                ELSE n.nspname || '.' || c.relname END AS name
                      FROM tree
                      JOIN pg_catalog.pg_class c ON c.oid = tree.oid
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.relkind = 'r'
                     ORDER BY c.relname
        LOOP
            PERFORM pg_catalog.set_config('role', p.owner, true);
            -- claimed, or skipped with the reason recorded (busy, done for this cutoff, gone)
            IF ttl._begin_unit(run, p.relid, leaf.oid, leaf.name, 'delete', cutoff) IS NOT NULL THEN
                COMMIT;
                CONTINUE;
            END IF;
            unit_status := 'ok';
            unit_error := NULL;
            cp := ttl.take_over_unit(leaf.oid);
            IF cp->>'strategy' IS DISTINCT FROM 'ctid' AND cp->>'strategy' IS DISTINCT FROM 'index'
               OR cp->>'strategy' = 'index' AND NOT EXISTS (SELECT 1 FROM ttl.policy po
                                                            WHERE po.relid = p.relid AND po.ttl_attnum IS NOT NULL) THEN
                cp := NULL;  -- not a checkpoint of row deletion, or a key of a TTL column the policy no longer has
            END IF;
            strategy := cp->>'strategy';  -- a unit resumes the way it was going
            BEGIN
                -- (waits for a lock on the partition no longer than lock_timeout) how its rows
                -- go (ttl.row_strategy, as pg-ttl run judges it); a block range first of
                -- delete_batch_size rows' worth of blocks, never more than select_batch_size
                -- rows' worth, whatever the density seen so far
                SELECT s.strategy, s.nblocks, greatest(1, ceil(p.delete_batch_size / d.per_block))::bigint,
                       greatest(1, ceil(p.select_batch_size / d.per_block))::bigint, d.per_block
                  INTO chosen, nblocks, step, max_step, per_block
                  FROM ttl.row_strategy(p.relid, leaf.oid, cutoff, coalesce(forced, 'auto')) s,
                       LATERAL (SELECT CASE WHEN s.relpages > 0 AND s.reltuples > 0
                                            THEN s.reltuples / s.relpages ELSE 100 END AS per_block) d;
                strategy := coalesce(strategy, chosen);
                IF strategy = 'index' THEN
                    k := coalesce(cp->>'from', cp->>'key', cp->>'after');  -- where its windows resume
                    SELECT x.window_end, x.delete_window, x.delete_window_skip, x.key_rows, x.next_key
                      INTO end_sql, del_sql, skip_sql, key_rows_sql, next_sql
                      FROM ttl.window_sql(p.relid, leaf.oid, cutoff) x;
                    -- the unit's first window (no checkpoint to resume): its cutoff shown
                    -- (none when resuming: no row of the query)
                    SELECT x.window_end, x.delete_window, x.delete_window_skip
                      INTO opening_end_sql, opening_del_sql, opening_skip_sql
                      FROM ttl.window_sql(p.relid, leaf.oid, cutoff, opening => true) x
                     WHERE k IS NULL;
                ELSE
                    del_sql := ttl.delete_rows_sql(p.relid, leaf.oid, cutoff);
                    skip_sql := ttl.delete_rows_sql(p.relid, leaf.oid, cutoff, skip_locked => true);
                END IF;
            EXCEPTION WHEN query_canceled OR OTHERS THEN
                SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
            END;
            PERFORM ttl._start_unit(run, leaf.oid, leaf.name, 'delete', strategy, cp);
            COMMIT;
            b := 0;
            IF cp->>'strategy' = 'ctid' THEN
                b := coalesce(pg_catalog.split_part(pg_catalog.btrim(cp->>'from', '()'), ',', 1)::bigint, 0);
                nblocks := least(nblocks, (cp->>'end')::bigint);  -- rows that arrived since are the next run's
            END IF;
            -- Names in the expression resolve in pg_catalog first, then the table's schema.
            PERFORM pg_catalog.set_config('search_path', ttl._table_search_path(p.relid), false);
            unit_start := pg_catalog.clock_timestamp();
            unit_n := 0;
            rate := CASE WHEN p.delete_rate_limit > 0 AND p.select_rate_limit > 0
                         THEN least(p.delete_rate_limit, p.select_rate_limit)
                         ELSE greatest(p.delete_rate_limit, p.select_rate_limit) END;
            -- One range a turn, in one of two ways (as pg-ttl run deletes them, rows.py):
            -- key windows [k, e) with e the key a step of expired rows on from k (read for
            -- every window: rows.py guesses e past its second window, a time guard with it,
            -- which this procedure, one statement to its caller, cannot set), each one
            -- transaction with the unit's counters and checkpoint (every row below e went),
            -- the step from delete_batch_size rows toward ttl.transaction_seconds() a
            -- window (a rate limit keeps it at delete_batch_size); a key with a step of
            -- rows or more: its rows in ctid windows between its first and last row
            -- (ttl.key_window_slots), each one transaction with the counters and a
            -- checkpoint naming the key and the window's last ctid, then key windows from
            -- the next key on. Block ranges are grouped
            -- into transactions of about ttl.transaction_seconds(), each committed with one
            -- update of the unit's counters and checkpoint (a rate limit: every range its
            -- own transaction), a range sized from the expired rows the last one held,
            -- toward delete_batch_size of them. Waits for a rate limit fall between
            -- transactions.
            tie_key := NULL;
            IF strategy = 'index' THEN
                win := p.delete_batch_size;
            END IF;
            group_start := pg_catalog.clock_timestamp();
            group_n := 0;
            WHILE unit_status = 'ok' AND (strategy = 'index' OR b < coalesce(nblocks, 0)) LOOP
                PERFORM pg_catalog.set_config('role', p.owner, true);
                IF tie_key IS NOT NULL AND tie_pos >= tie_end THEN
                    -- the key's last row passed: key windows from the next expired key on
                    BEGIN
                        EXECUTE next_sql USING tie_key INTO k;
                    EXCEPTION WHEN query_canceled OR OTHERS THEN
                        SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
                    END;
                    tie_key := NULL;
                    EXIT WHEN unit_status <> 'ok' OR k IS NULL;
                    group_start := pg_catalog.clock_timestamp();
                END IF;
                IF tie_key IS NOT NULL THEN
                    hi_pos := least(tie_end, tie_pos + tie_span);
                    lo := format('(%s,%s)', tie_pos / slots, tie_pos % slots);
                    hi := format('(%s,%s)', hi_pos / slots, hi_pos % slots);
                ELSIF strategy = 'index' THEN
                    BEGIN
                        -- keys only, under lock_timeout
                        EXECUTE CASE WHEN k IS NULL THEN opening_end_sql ELSE end_sql END USING k, win INTO e;
                        IF e = k THEN
                            -- a step of rows or more share this key: its first and last row,
                            -- and the statements of its ctid windows
                            EXECUTE key_rows_sql USING k INTO first_tid, last_tid;
                            SELECT x.delete_key_window, x.delete_key_window_skip INTO key_sql, key_skip_sql
                              FROM ttl.key_window_sql(p.relid, leaf.oid, cutoff, k) x;
                        END IF;
                    EXCEPTION WHEN query_canceled OR OTHERS THEN
                        SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
                    END;
                    EXIT WHEN unit_status <> 'ok';
                    IF e = k THEN
                        tie_key := k;
                        slots := ttl.block_slots();
                        IF last_tid IS NULL THEN  -- its rows went meanwhile: on to the next key
                            tie_pos := 0;
                            tie_end := 0;
                            CONTINUE;
                        END IF;
                        -- from its first row, or after the row a checkpoint of this key names
                        first_tid := CASE WHEN cp->>'key' = k AND cp->>'ctid' IS NOT NULL THEN cp->>'ctid'
                                          ELSE format('(%s,0)', (first_tid::pg_catalog.tid::text::point)[0]) END;
                        tie_pos := (first_tid::pg_catalog.tid::text::point)[0]::bigint * slots
                                   + (first_tid::pg_catalog.tid::text::point)[1]::bigint;
                        tie_end := (last_tid::pg_catalog.tid::text::point)[0]::bigint * slots
                                   + (last_tid::pg_catalog.tid::text::point)[1]::bigint;
                        tie_span := ttl.key_window_slots(p.delete_batch_size, rate > 0, NULL, per_block);
                        group_start := pg_catalog.clock_timestamp();
                        CONTINUE;
                    END IF;
                    lo := k;
                    hi := e;
                ELSE
                    lo := format('(%s,0)', b);
                    hi := format('(%s,0)', b + step);
                END IF;
                BEGIN
                    PERFORM pg_catalog.set_config('lock_timeout', coalesce(row_lock_t, '50ms'), true);
                    IF tie_key IS NOT NULL THEN
                        EXECUTE key_sql USING lo, hi;
                    ELSE  -- (lo is NULL for a unit's first key window only)
                        EXECUTE CASE WHEN lo IS NULL THEN opening_del_sql ELSE del_sql END USING lo, hi;
                    END IF;
                    GET DIAGNOSTICS n = ROW_COUNT;
                EXCEPTION WHEN lock_not_available OR serialization_failure THEN
                    -- an application holds a row (or moved it to another partition meanwhile):
                    -- redo the range without waiting on row locks; locked rows wait for the next run
                    BEGIN
                        PERFORM pg_catalog.set_config('lock_timeout', coalesce(lock_t, '1s'), true);
                        IF tie_key IS NOT NULL THEN
                            EXECUTE key_skip_sql USING lo, hi;
                        ELSE
                            EXECUTE CASE WHEN lo IS NULL THEN opening_skip_sql ELSE skip_sql END USING lo, hi;
                        END IF;
                        GET DIAGNOSTICS n = ROW_COUNT;
                    EXCEPTION WHEN serialization_failure THEN
                        n := 0;  -- moved again meanwhile: left for the next run
                        unit_error := 'rows moved to another partition during the run were left for the next run';
                    WHEN query_canceled OR OTHERS THEN
                        SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
                    END;
                WHEN query_canceled OR OTHERS THEN
                    SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
                END;
                EXIT WHEN unit_status <> 'ok';
                unit_n := unit_n + n;
                IF tie_key IS NOT NULL THEN
                    UPDATE ttl.run_unit SET rows_selected = rows_selected + n, rows_deleted = rows_deleted + n,
                           checkpoint = jsonb_build_object('strategy', 'index', 'key', tie_key, 'ctid', hi)
                     WHERE run_id = run AND unit_relid = leaf.oid;
                    COMMIT;
                    tie_span := ttl.key_window_slots(
                        ttl.window_rows(p.delete_batch_size, n, n,
                                        extract(epoch FROM pg_catalog.clock_timestamp() - group_start), rate > 0),
                        rate > 0, n::float8 / (hi_pos - tie_pos), per_block);
                    tie_pos := hi_pos;
                ELSIF strategy = 'index' THEN
                    UPDATE ttl.run_unit SET rows_selected = rows_selected + n, rows_deleted = rows_deleted + n,
                           checkpoint = jsonb_build_object('strategy', 'index', 'from', e)
                     WHERE run_id = run AND unit_relid = leaf.oid;
                    COMMIT;
                    EXIT WHEN e IS NULL;  -- the last window: every key from k on
                    k := e;
                    win := ttl.window_rows(p.delete_batch_size, win, n,
                                           extract(epoch FROM pg_catalog.clock_timestamp() - group_start), rate > 0);
                ELSE
                    b := b + step;
                    group_n := group_n + n;
                    step := greatest(1, least(max_step, step * 4, (step * p.delete_batch_size) / greatest(n, 1)));
                    CONTINUE WHEN rate = 0 AND b < nblocks
                                  AND pg_catalog.clock_timestamp() - group_start
                                      < pg_catalog.make_interval(secs => ttl.transaction_seconds());
                    UPDATE ttl.run_unit SET rows_selected = rows_selected + group_n,
                           rows_deleted = rows_deleted + group_n,
                           checkpoint = jsonb_build_object('strategy', 'ctid', 'from', format('(%s,0)', b),
                                                           'end', nblocks)
                     WHERE run_id = run AND unit_relid = leaf.oid;
                    COMMIT;
                    group_n := 0;
                END IF;
                IF rate > 0 THEN
                    -- between transactions: the rows so far at `rate` rows/s
                    BEGIN
                        PERFORM pg_catalog.pg_sleep(greatest(0, unit_n::float8 / rate - extract(epoch FROM
                                                    pg_catalog.clock_timestamp() - unit_start)));
                    EXCEPTION WHEN query_canceled THEN
                        SELECT f.status, f.error INTO unit_status, unit_error FROM ttl._unit_failure(SQLSTATE, SQLERRM) f;
                    END;
                END IF;
                group_start := pg_catalog.clock_timestamp();
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
            PERFORM ttl._end_unit(run, leaf.oid, unit_status, unit_error, true);
            COMMIT;
            EXIT WHEN unit_status = 'interrupted';
        END LOOP;
        PERFORM pg_catalog.set_config('role', p.owner, true);
        PERFORM ttl._finish_run(run, NULL, NULL);
        COMMIT;
        EXIT WHEN unit_status = 'interrupted';
    END LOOP;
    IF unit_status IS DISTINCT FROM 'interrupted' THEN
        PERFORM ttl.prune_history();
    END IF;
    PERFORM pg_catalog.set_config('search_path', old_path, false),
            pg_catalog.set_config('TimeZone', old_tz, false),
            pg_catalog.set_config('DateStyle', old_ds, false),
            pg_catalog.set_config('extra_float_digits', old_digits, false),
            pg_catalog.set_config('lock_timeout', old_lock, false);
    IF unit_status = 'interrupted' THEN
        COMMIT;  -- what was done and recorded stays; the session's settings are back
        RAISE EXCEPTION '%', unit_error USING ERRCODE = 'query_canceled',
            HINT = 'The interrupted unit keeps its checkpoint: the next run goes on from there.';
    END IF;
END
$fn$;
