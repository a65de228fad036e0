-- Deleting a unit's expired rows: the statements, and the choice between key windows
-- and block ranges, that pg-ttl run, the worker and CALL ttl.run() share.

-- What the statements that delete a unit's rows share: the unit's name, the policy's
-- expiry at `cutoff` (never later than now(): rows would go early) and its bound
-- (column policies: `col <= threshold`, ttl.expired_sql; `hide_constants` as its).
DROP FUNCTION IF EXISTS ttl._unit_expiry_sql(regclass, regclass, timestamptz);
CREATE OR REPLACE FUNCTION ttl._unit_expiry_sql(tbl regclass, part regclass, cutoff timestamptz,
                                                hide_constants boolean DEFAULT false,
                                                OUT target text, OUT expired text, OUT bound text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT e.expired, e.bound INTO expired, bound FROM ttl.expired_sql(tbl, cutoff, hide_constants) e;
    IF expired IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL policy', tbl USING ERRCODE = 'undefined_object';
    END IF;
    target := ttl._qualified(part);
    IF target IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', part::oid USING ERRCODE = 'undefined_table';
    END IF;
END
$fn$;

-- A DELETE of the rows of `target` in `range` whose expiry is `expired`, re-checked; with
-- `skip_locked`, leaving the rows an application holds locked for the next run (FOR
-- UPDATE SKIP LOCKED): locking every row first costs as much as the delete, so only then.
CREATE OR REPLACE FUNCTION ttl._delete_sql(target text, range text, expired text, skip_locked boolean)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN skip_locked
                THEN format('DELETE FROM ONLY %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY(ARRAY(SELECT ctid'
                            ' FROM ONLY %1$s WHERE %2$s AND %3$s FOR UPDATE SKIP LOCKED)) AND %3$s',
                            target, range, expired)
                ELSE format('DELETE FROM ONLY %s WHERE %s AND %s', target, range, expired) END
$fn$;

-- Row deletion by block range: the one DELETE that pg-ttl run, the worker and
-- CALL ttl.run() all execute when they sweep a table (or leaf partition) in
-- ctid order. ttl.delete_rows_sql() returns the statement for a unit (once per
-- unit: no cost per range), with the block range as parameters $1 and $2
-- (tids '(from_block,0)' and '(to_block,0)'); it deletes the rows of the range
-- whose expiry (ttl.expired_sql, re-checked in the DELETE itself) is at or
-- before `cutoff`.
-- Callers run it as the table's owner, with names resolving in pg_catalog
-- first, then the table's schema (ttl._table_search_path), the plain form under
-- the short row_lock_timeout setting; if the application holds a row of the
-- range (lock_not_available), they redo the range with the skip_locked form
-- under lock_timeout: FOR UPDATE SKIP LOCKED leaves the locked rows for the
-- next run (locking every row first costs as much as the delete, so only then).
-- A row the application moves to another partition while the DELETE waits on
-- it fails the statement with SQLSTATE 40001 (serialization_failure), even in
-- READ COMMITTED: callers retry the range (a new statement no longer sees the
-- row there). The cutoff is hidden from the planner's estimates (ttl._constant_sql):
-- CALL ttl.run() plans every range anew, and a sweep may delete at the low end of an
-- index on the TTL column (many rows at one old key in a table in random order), whose
-- dead entries each estimate would walk.
CREATE OR REPLACE FUNCTION ttl.delete_rows_sql(tbl regclass, part regclass, cutoff timestamptz,
                                               skip_locked boolean DEFAULT false)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl._delete_sql(u.target, 'ctid OPERATOR(pg_catalog.>=) $1::pg_catalog.tid'
                                     ' AND ctid OPERATOR(pg_catalog.<) $2::pg_catalog.tid', u.expired, skip_locked)
      FROM ttl._unit_expiry_sql(tbl, part, cutoff, true) u
$fn$;

-- The row_range_bytes setting in blocks: the size of a shared sweep's ranges
-- (pg_ttl/expire/sweeps.py); 0: row expiry is never shared.
CREATE OR REPLACE FUNCTION ttl.row_range_blocks() RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce((SELECT pg_size_bytes(s.value) / current_setting('block_size')::int8
                       FROM ttl.settings s WHERE s.name = 'row_range_bytes'), 0)
$fn$;

-- From how many blocks (pg_class.relpages: the size as of the last VACUUM or ANALYZE)
-- a table's row expiry in ctid order is shared range by range by the runs at work on
-- it at once, and workers join a round another worker is running on it: two ranges of
-- row_range_bytes. NULL when that is 0 (never).
CREATE OR REPLACE FUNCTION ttl.shared_sweep_blocks() RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT nullif(2 * ttl.row_range_blocks(), 0)
$fn$;

-- How a unit's expired rows are deleted, for pg-ttl run, the worker and
-- CALL ttl.run() alike: 'index' (key windows over a btree on the TTL column,
-- ttl.window_sql) when they touch few heap pages, else 'ctid' (block ranges,
-- one sequential sweep, ttl.delete_rows_sql). `forced` is the row_strategy
-- setting ('auto', 'index' or 'ctid'). With the planner's estimate of the
-- unit's expired rows (for progress; not read for a unit of 8 blocks or less
-- without such an index: swept at once) and the unit's size: blocks now,
-- reltuples and relpages as of its last ANALYZE.
-- The shares, measured in insertion order (|correlation| >= 0.9; 1M and 10M rows
-- of 100 B, PostgreSQL 15, 2 cores, python -m bench.row_expiry --strategies,
-- median of 3): windows read only the expired part of the heap, in order. With
-- windows sized by time (2026-11-29): 1%: 0.040 s vs a sweep's 0.081 s (10M:
-- 0.088 s vs 1.02 s); 50%: 0.274 s vs 0.332 s (10M: 2.52 s vs 2.63 s); 70%:
-- 0.379 s vs 0.388 s; 90%: 0.469 s vs 0.426 s: up to 60%. In random order
-- every deleted row is a random heap page and the index lost from ~2% on (5%:
-- 0.51 s vs 0.31 s; 50%: 2.5 s vs 0.53 s on 2M rows).
-- Runs the owner's expression through the planner: call it as the table's owner.
CREATE OR REPLACE FUNCTION ttl.row_strategy(tbl regclass, part regclass, cutoff timestamptz,
                                            forced text DEFAULT 'auto',
                                            OUT strategy text, OUT expired_estimate bigint, OUT nblocks bigint,
                                            OUT reltuples float8, OUT relpages bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    col name;
    has_index boolean;
    correlation float4;
    expired text;
    plan json;
BEGIN
    IF forced NOT IN ('auto', 'index', 'ctid') THEN
        RAISE EXCEPTION 'row_strategy must be auto, index or ctid, not %', forced
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (waits for a lock on the unit no longer than lock_timeout)
    SELECT pg_relation_size(c.oid) / current_setting('block_size')::int8, c.reltuples, c.relpages
      INTO nblocks, reltuples, relpages
      FROM pg_class c WHERE c.oid = part;
    IF nblocks IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', part::oid USING ERRCODE = 'undefined_table';
    END IF;
    SELECT ttl._attname(p.relid, p.ttl_attnum) INTO col FROM ttl.policy p WHERE p.relid = tbl;
    has_index := col IS NOT NULL AND EXISTS (
        SELECT 1 FROM pg_index i
          JOIN pg_class ic ON ic.oid = i.indexrelid
          JOIN pg_am am ON am.oid = ic.relam
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
         WHERE i.indrelid = part AND i.indisvalid AND i.indisready AND i.indpred IS NULL
           AND am.amname = 'btree' AND a.attname = col);
    strategy := CASE WHEN NOT has_index OR forced = 'ctid' THEN 'ctid' WHEN forced = 'index' THEN 'index' END;
    IF strategy = 'ctid' AND nblocks <= 8 THEN
        RETURN;
    END IF;
    SELECT u.expired INTO expired FROM ttl._unit_expiry_sql(tbl, part, cutoff) u;
    -- names in the expression resolve as the engine's statements resolve them
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM ONLY %s WHERE %s', part, expired) INTO plan;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    expired_estimate := (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8::int8;
    IF strategy IS NOT NULL THEN
        RETURN;
    END IF;
    IF reltuples <= 0 OR expired_estimate / reltuples <= 0.02 THEN
        -- never analyzed (no reason to think it is dense), or sparse whatever the order:
        -- no need to read the correlation (1 ms in a new session)
        strategy := 'index';
        RETURN;
    END IF;
    -- pg_stats (not pg_statistic: the owner may read only the view) by constant names,
    -- so its indexes find the one row
    SELECT s.correlation INTO correlation
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = col
     WHERE c.oid = part;
    strategy := CASE WHEN expired_estimate / reltuples
                          <= CASE WHEN abs(coalesce(correlation, 0)) >= 0.9 THEN 0.6 ELSE 0.02 END
                     THEN 'index' ELSE 'ctid' END;
END
$fn$;

-- The statement reading the first and the last row of one key of a unit, for pg-ttl run,
-- the worker and CALL ttl.run() alike: $1 the key (text); returns the ctids of its first
-- and last row, as text (NULL, NULL: no row has the key). A btree built by PostgreSQL 12
-- or later keeps one key's rows in ctid order, ascending whichever way the index is
-- ordered, so its first rows come first in a scan one way and its last ones in the other:
-- both ways are read, block_size / 6 entries each (more ctids than a page holds: a
-- posting list counts for many), so that either index order gives both ends. The key is
-- hidden from the planner's estimates (the windows before left dead entries at the
-- index's low end). Callers run it as the table's owner.
CREATE OR REPLACE FUNCTION ttl.key_rows_sql(tbl regclass, part regclass) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    target text;
    col text;
    typ text;
    key_is text;
BEGIN
    SELECT format('%I', ttl._attname(p.relid, p.ttl_attnum)), format_type(p.ttl_atttypid, NULL)
      INTO col, typ FROM ttl.policy p WHERE p.relid = tbl;
    target := ttl._qualified(part);
    IF col IS NULL OR target IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL column to read a key''s rows by', tbl
            USING ERRCODE = 'feature_not_supported';
    END IF;
    key_is := format('%1$s OPERATOR(pg_catalog.>=) (SELECT CAST($1::text AS %2$s))'
                     ' AND %1$s OPERATOR(pg_catalog.<=) (SELECT CAST($1::text AS %2$s))', col, typ);
    RETURN format('SELECT CAST(pg_catalog.min(s.c) AS text), CAST(pg_catalog.max(s.c) AS text) FROM ('
                  '(SELECT ctid AS c FROM ONLY %1$s WHERE %2$s ORDER BY %3$s'
                  ' LIMIT pg_catalog.current_setting(''block_size'')::int / 6)'
                  ' UNION ALL '
                  '(SELECT ctid AS c FROM ONLY %1$s WHERE %2$s ORDER BY %3$s DESC'
                  ' LIMIT pg_catalog.current_setting(''block_size'')::int / 6)) s', target, key_is, col);
END
$fn$;

-- Key windows over a btree on the TTL column (the 'index' strategy of
-- ttl.row_strategy): the statements CALL ttl.run() executes. A window is the
-- rows of keys [k1, k2), k2 read as the key `step` expired rows on from k1 (keys
-- only, in the index's order: an index-only scan where the visibility map
-- allows), deleted with the expiry re-checked.
--   window_end:         $1 the window's first key (text; NULL: from the first
--                       expired row), $2 the step; returns the window's end key
--                       as text, or no row: fewer rows are left.
--   delete_window:      $1 the first key (NULL: none), $2 the end key, excluded
--                       (NULL: every key on).
--   delete_window_skip: the same, leaving rows an application holds locked (FOR
--                       UPDATE SKIP LOCKED), as ttl.delete_rows_sql's skip_locked form.
-- A NULL bound folds away when the statement is planned with its values (EXECUTE
-- ... USING plans each execution), leaving one index range. The constants are hidden
-- from the planner's estimates (ttl._constant_sql): the cutoff, and a window's keys
-- once it has a first key; the first window's end, its only bound, shows, so that its
-- estimate still chooses between the index and a sequential scan. With `opening`, the
-- forms of a unit's first window (no checkpoint to resume: no window of this pass left
-- dead index entries before it): the run's expiry and bound, the cutoff shown too, as
-- pg-ttl run's first window (ranges._window_expiry). Hidden, the cutoff is estimated to
-- pass a third of the table: when fewer than a step of rows have expired (the window
-- has no end), its DELETE was planned as if to delete that third, and PostgreSQL's JIT
-- compiled it (8 ms at 10M rows with nothing expired). Callers run them as the table's
-- owner, names resolving in ttl._table_search_path.
-- A key with a step of rows or more (a bulk load stamped with one now()) is deleted in
-- ctid windows between its first and last row (ttl.key_window_slots sizes them):
--   key_rows:           $1 the key (text); returns the ctids of its first and last row
--                       (ttl.key_rows_sql).
--   next_key:           $1 a key; returns the first expired key past it (text), or NULL.
DROP FUNCTION IF EXISTS ttl.window_sql(regclass, regclass, timestamptz);
DROP FUNCTION IF EXISTS ttl.window_sql(regclass, regclass, timestamptz, boolean);
CREATE FUNCTION ttl.window_sql(tbl regclass, part regclass, cutoff timestamptz, opening boolean DEFAULT false,
                               OUT window_end text, OUT delete_window text, OUT delete_window_skip text,
                               OUT key_rows text, OUT next_key text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    u record;
    col text;
    typ text;
    keys text;
BEGIN
    SELECT * INTO u FROM ttl._unit_expiry_sql(tbl, part, cutoff, NOT opening);
    SELECT ttl._attname(p.relid, p.ttl_attnum), format_type(p.ttl_atttypid, NULL)
      INTO col, typ FROM ttl.policy p WHERE p.relid = tbl;
    IF u.bound IS NULL OR col IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL column bound to window its rows on', tbl
            USING ERRCODE = 'feature_not_supported';
    END IF;
    col := format('%I', col);
    -- (the cast of the end key to text above the OFFSET, which would otherwise cast every
    -- row it skips; named apart: ORDER BY a name an output column has sorts by that column)
    window_end := format('SELECT CAST(s.window_end AS text) FROM (SELECT %1$s AS window_end FROM ONLY %2$s'
                         ' WHERE %3$s AND ($1::text IS NULL OR %1$s OPERATOR(pg_catalog.>=) (SELECT CAST($1::text AS %4$s)))'
                         ' ORDER BY %1$s OFFSET $2 LIMIT 1) s', col, u.target, u.bound, typ);
    keys := format('($1::text IS NULL OR %1$s OPERATOR(pg_catalog.>=) (SELECT CAST($1::text AS %2$s)))'
                   ' AND ($2::text IS NULL'
                   '      OR ($1::text IS NULL AND %1$s OPERATOR(pg_catalog.<) CAST($2::text AS %2$s))'
                   '      OR ($1::text IS NOT NULL AND %1$s OPERATOR(pg_catalog.<) (SELECT CAST($2::text AS %2$s))))',
                   col, typ);
    delete_window := ttl._delete_sql(u.target, keys, u.expired, false);
    delete_window_skip := ttl._delete_sql(u.target, keys, u.expired, true);
    key_rows := ttl.key_rows_sql(tbl, part);
    next_key := format('SELECT CAST(pg_catalog.min(%1$s) AS text) FROM ONLY %2$s WHERE %3$s'
                       ' AND %1$s OPERATOR(pg_catalog.>) (SELECT CAST($1::text AS %4$s))', col, u.target, u.bound, typ);
END
$fn$;

-- How long one transaction of row expiry aims to take, in seconds: short enough that
-- other sessions barely wait on the rows it locks, long enough that its commit and round
-- trips cost little next to its DELETE. The one target of pg-ttl run, the worker and
-- CALL ttl.run() alike: key windows (ttl.window_rows), block ranges grouped into
-- transactions (CALL ttl.run(), pg_ttl/expire/rows.py) and a shared sweep's DELETEs
-- (pg_ttl/expire/sweeps.py); the engine reads it with each pass's settings
-- (ttl._pass_settings).
CREATE OR REPLACE FUNCTION ttl.transaction_seconds() RETURNS float8
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT 0.05::float8
$fn$;

-- How many rows the next key window holds, for pg-ttl run, the worker and CALL
-- ttl.run() alike: toward ttl.transaction_seconds() a DELETE from what the last window
-- took (`deleted` rows in `seconds`), at most four times the last one's `last_rows`, at
-- most 1,000,000 rows (or `batch`, delete_batch_size, if larger), at least `batch`;
-- `batch` while the pass is `paced` (a rate limit or the throttle slows it: waits fall
-- between windows of that many rows). By time, not select_batch_size: with windows of
-- 10,000 rows their round trips and commits cost a third of a raw DELETE's time. A call
-- with constants is folded by the planner: a window's read has its OFFSET as a constant.
CREATE OR REPLACE FUNCTION ttl.window_rows(batch bigint, last_rows bigint, deleted bigint, seconds float8,
                                           paced boolean)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN paced THEN batch
                ELSE greatest(batch, least(greatest(1000000, batch), last_rows * 4,
                                           (greatest(deleted, 1) * ttl.transaction_seconds()
                                            / greatest(seconds, 0.0001))::int8))
           END
$fn$;

-- The ctid windows of one key (`key`, text) with a step of rows or more, for CALL
-- ttl.run() and pg-ttl run alike (ranges.tie_batches reads them with the key's rows):
--   delete_key_window:      $1, $2 the window's ctids (text; rows after $1, up to $2
--                           included): a TID range scan, no index range on a key of that
--                           many rows.
--   delete_key_window_skip: the same, leaving rows an application holds locked.
-- The key is a literal, cast as the statement is parsed: as a parameter its cast (a
-- timestamp's input function is not immutable) would be evaluated for every row the scan
-- filters. Its test is wrapped in IS TRUE, which no index serves: with the bare
-- comparison (or the key in a subquery) the planner may scan the key's index entries,
-- every row of the key, for a window instead of its range; a NULL never expires, so IS
-- TRUE changes no row's fate.
CREATE OR REPLACE FUNCTION ttl.key_window_sql(tbl regclass, part regclass, cutoff timestamptz, key text,
                                              OUT delete_key_window text, OUT delete_key_window_skip text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    u record;
    range text;
BEGIN
    SELECT * INTO u FROM ttl._unit_expiry_sql(tbl, part, cutoff, true);
    SELECT format('(%I OPERATOR(pg_catalog.=) CAST(%L AS %s)) IS TRUE', ttl._attname(p.relid, p.ttl_attnum), key,
                  format_type(p.ttl_atttypid, NULL))
           || ' AND ctid OPERATOR(pg_catalog.>) CAST($1::text AS pg_catalog.tid)'
           || ' AND ctid OPERATOR(pg_catalog.<=) CAST($2::text AS pg_catalog.tid)'
      INTO range FROM ttl.policy p WHERE p.relid = tbl;
    delete_key_window := ttl._delete_sql(u.target, range, u.expired, false);
    delete_key_window_skip := ttl._delete_sql(u.target, range, u.expired, true);
END
$fn$;

-- The tuple slots of a heap block: offsets 0 (never a row's) to MaxHeapTuplesPerPage, a
-- line pointer and a tuple header each at least. A ctid window of a key spans slots:
-- n slots hold at most n rows.
CREATE OR REPLACE FUNCTION ttl.block_slots() RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (current_setting('block_size')::int - 24) / 28 + 1
$fn$;

-- How many tuple slots the next ctid window of a key with more rows than a key window
-- spans, for pg-ttl run, the worker and CALL ttl.run() alike: its `rows`
-- (ttl.window_rows) at the key's `density` in the last window (rows a slot; NULL for
-- the first: the table's, `per_block` rows a block), and at most four times its rows at
-- the table's density (a key sparse so far that meets dense blocks overruns its time
-- fourfold at most); while the pass is `paced`, exactly `rows` slots: it cannot hold
-- more rows than delete_batch_size.
CREATE OR REPLACE FUNCTION ttl.key_window_slots(rows bigint, paced boolean, density float8, per_block float8)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT greatest(1, CASE WHEN paced THEN rows
                            ELSE least(ceil(rows / greatest(coalesce(density, per_block / ttl.block_slots()),
                                                            1.0 / ttl.block_slots())),
                                       ceil(4 * rows * ttl.block_slots() / greatest(per_block, 1))) END)::int8
$fn$;

-- The end of a key window guessed from the last one, for pg-ttl run and the worker
-- (pg_ttl/expire/rows.py): `k0`, the window's first key, plus `factor` times the keys
-- the last window spanned, [first, last). Reading the end key a step of rows on costs
-- an index entry a row (an eighth of the DELETE's time at 50% of 1M rows); a guess
-- costs nothing, and a window that overruns its time is rolled back and read. NULL
-- when no key past `k0` comes of it (the span too small for the type, or out of its
-- range): the caller reads the end instead.
CREATE OR REPLACE FUNCTION ttl.window_guess(k0 anyelement, first anyelement, last anyelement, factor float8)
RETURNS anyelement
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    guess k0%TYPE;
BEGIN
    -- (each branch is planned only for the type it serves)
    CASE pg_typeof(k0)
        WHEN 'timestamptz'::regtype, 'timestamp'::regtype THEN
            guess := k0 + (last - first) * factor;
        WHEN 'date'::regtype THEN
            guess := k0 + greatest(1, ceil((last - first) * factor))::int4;
        ELSE  -- int4, int8, numeric
            guess := k0 + greatest(1, ceil((last - first) * factor));
    END CASE;
    RETURN CASE WHEN guess > k0 THEN guess END;
EXCEPTION WHEN data_exception THEN  -- out of the type's range
    RETURN NULL;
END
$fn$;

-- What a pass of the engine reads of the settings, once: every setting as text,
-- the WAL a replica may have left before the throttle slows down (bytes), the
-- shared sweeps' sizes in blocks and how long a transaction aims to take. pg-ttl
-- run reads it with the pass's cutoff; the worker with each run's start, in the
-- statement that begins it.
CREATE OR REPLACE FUNCTION ttl._pass_settings(OUT settings json, OUT replica_lag_bytes bigint,
                                              OUT row_range_blocks bigint, OUT shared_sweep_blocks bigint,
                                              OUT transaction_seconds float8)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (SELECT json_object_agg(s.name, s.value) FROM ttl.settings s),
           -- the size as PostgreSQL reads it ('256MB', '1 GB')
           (SELECT pg_size_bytes(s.value) FROM ttl.settings s WHERE s.name = 'throttle_replica_lag'),
           ttl.row_range_blocks(), ttl.shared_sweep_blocks(), ttl.transaction_seconds()
$fn$;
