-- The blocks [from_block, to_block) of a table, as SQL over its ctid.
CREATE OR REPLACE FUNCTION ttl._block_range_sql(from_block bigint, to_block bigint) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('ctid OPERATOR(pg_catalog.>=) %L::pg_catalog.tid AND ctid OPERATOR(pg_catalog.<) %L::pg_catalog.tid',
                  format('(%s,0)', from_block), format('(%s,0)', to_block))
$fn$;

-- Run one nulling statement of `tbl` (a query returning how many values it
-- changed), for ttl.null_expired_values and ttl.null_expired_cells: it is not a
-- write (pg_ttl.expiring: no write time or row expiry moves), names resolve in
-- the table's schema; the plain form under the short row_lock_timeout first,
-- and if the application holds a row, `skip_locked` (the same, skipping the rows
-- held) under lock_timeout.
CREATE OR REPLACE FUNCTION ttl._run_nulling(tbl regclass, plain text, skip_locked text) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('pg_ttl.expiring', 'on', true);
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    PERFORM set_config('lock_timeout',
                       coalesce((SELECT value FROM ttl.settings WHERE name = 'row_lock_timeout'), '50ms'), true);
    BEGIN
        EXECUTE plain INTO n;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout',
                           coalesce((SELECT value FROM ttl.settings WHERE name = 'lock_timeout'), '1s'), true);
        EXECUTE skip_locked INTO n;
    END;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    PERFORM set_config('pg_ttl.expiring', 'off', true);
    RETURN n;
END
$fn$;

-- Column nulling, for the engine (pg_ttl/expire/columns.py). One batch on one
-- table or leaf partition: the blocks [from_block, to_block) of it, read once
-- (the engine walks a unit's blocks in ranges sized to hold about one batch of
-- due values, so a pass costs one sweep, however many values are due).
-- Expired values become NULL (or DEFAULT for NOT NULL columns); the expiry is
-- re-checked in the UPDATE itself. A plain UPDATE under the short
-- row_lock_timeout setting first; if the application holds a row of the range,
-- the range again with FOR UPDATE SKIP LOCKED (locking every row first costs
-- as much as the update, so only then), leaving the locked rows for the next
-- run. Returns the number of rows changed.
CREATE OR REPLACE FUNCTION ttl.null_expired_values(tbl regclass, part regclass, column_name name,
                                                   cutoff timestamptz, from_block bigint, to_block bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    cp ttl.column_policy;
    expiry text;
    target text;
    pending text;
    range text;
    a record;
BEGIN
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl, column_name, 'column');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table % has no TTL', column_name, tbl USING ERRCODE = 'undefined_object';
    END IF;
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): values would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT attnotnull INTO a FROM pg_attribute WHERE attrelid = part AND attname = column_name AND NOT attisdropped;
    expiry := ttl._value_expiry_sql(tbl, cp.attnum);
    IF expiry IS NULL THEN
        RETURN 0;
    END IF;
    target := CASE WHEN a.attnotnull THEN 'DEFAULT' ELSE 'NULL' END;
    IF cp.relative_to = 'write' THEN
        -- A nulled value is no longer tracked: it never expires again.
        target := format('%s, %I = NULL', target, ttl._attname(tbl, cp.track_attnum));
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz', expiry, cutoff);
    ELSIF a.attnotnull THEN
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz AND %I IS DISTINCT FROM %s', expiry, cutoff, column_name,
                          (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute x
                               ON x.attrelid = d.adrelid AND x.attnum = d.adnum
                            WHERE d.adrelid = part AND x.attname = column_name));
    ELSE
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz AND %I IS NOT NULL', expiry, cutoff, column_name);
    END IF;
    range := ttl._block_range_sql(from_block, to_block);
    RETURN ttl._run_nulling(tbl,
        format('WITH done AS (UPDATE ONLY %1$s SET %3$I = %4$s WHERE %5$s AND %2$s RETURNING 1) '
               'SELECT pg_catalog.count(*) FROM done', part, pending, column_name, target, range),
        format('WITH due AS (SELECT ctid FROM ONLY %1$s WHERE %5$s AND %2$s FOR UPDATE SKIP LOCKED), '
               'done AS (UPDATE ONLY %1$s AS t SET %3$I = %4$s FROM due WHERE t.ctid = due.ctid AND %2$s RETURNING 1) '
               'SELECT pg_catalog.count(*) FROM done', part, pending, column_name, target, range));
END
$fn$;
