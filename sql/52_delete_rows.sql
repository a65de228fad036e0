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
-- row there).
CREATE OR REPLACE FUNCTION ttl.delete_rows_sql(tbl regclass, part regclass, cutoff timestamptz,
                                               skip_locked boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    expired text;
    target text;
    range text := 'ctid OPERATOR(pg_catalog.>=) $1::pg_catalog.tid AND ctid OPERATOR(pg_catalog.<) $2::pg_catalog.tid';
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT e.expired INTO expired FROM ttl.expired_sql(tbl, cutoff) e;
    IF expired IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL policy', tbl USING ERRCODE = 'undefined_object';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname) INTO target
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = part;
    IF target IS NULL THEN
        RAISE EXCEPTION 'relation with OID % does not exist', part::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF skip_locked THEN
        RETURN format('DELETE FROM ONLY %1$s WHERE ctid OPERATOR(pg_catalog.=) ANY(ARRAY(SELECT ctid FROM ONLY %1$s'
                      ' WHERE %2$s AND %3$s FOR UPDATE SKIP LOCKED)) AND %3$s', target, range, expired);
    END IF;
    RETURN format('DELETE FROM ONLY %s WHERE %s AND %s', target, range, expired);
END
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
