-- ttl.ttl(), ttl.expires_at(), ttl.write_time() and friends: a row's or value's
-- expiry and write time, read with the one expiry definition (15_expiry.sql).

-- The table of a row value (a whole-row reference such as `t` in SELECT ttl.ttl(t) FROM t).
CREATE OR REPLACE FUNCTION ttl._row_table(typ regtype) RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    rel oid;
BEGIN
    SELECT typrelid INTO rel FROM pg_type WHERE oid = typ;
    IF rel IS NULL OR rel = 0 THEN
        RAISE EXCEPTION 'ttl functions take a table row (e.g. SELECT ttl.ttl(t) FROM t), not %', typ
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    -- A partition's row counts as a row of its partitioned table.
    RETURN coalesce((SELECT a.relid FROM pg_partition_ancestors(rel) a
                      JOIN ttl.policy p ON p.relid = a.relid LIMIT 1),
                    (SELECT a.relid FROM pg_partition_ancestors(rel) a
                      JOIN ttl.column_policy c ON c.relid = a.relid LIMIT 1),
                    rel);
END
$fn$;

-- Evaluate SQL `expr` (over the table's columns) for one row.
CREATE OR REPLACE FUNCTION ttl._eval_on_row(r anyelement, expr text, tbl oid) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    q text := format('SELECT (%s)::timestamptz FROM (SELECT ($1).*) AS ttl_row', expr);
    v timestamptz;
BEGIN
    IF expr IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE q INTO v USING r;
    RETURN v;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl._seconds_left(expires timestamptz) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN expires IS NULL THEN NULL
                ELSE greatest(ceil(extract(epoch FROM expires - now())), 0)::bigint END
$fn$;

-- When the row expires (NULL = never, or no TTL).
CREATE OR REPLACE FUNCTION ttl.expires_at(r anyelement) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = ttl._row_table(pg_typeof(r));
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN ttl._eval_on_row(r, ttl._row_expiry_sql(p), p.relid);
END
$fn$;

-- When the value of `column_name` expires (NULL = never, or no column TTL).
CREATE OR REPLACE FUNCTION ttl.expires_at(r anyelement, column_name name) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl oid := ttl._row_table(pg_typeof(r));
BEGIN
    RETURN ttl._eval_on_row(r, ttl._value_expiry_sql(tbl, ttl._attnum(tbl::regclass, column_name, 'column')), tbl);
END
$fn$;

-- Seconds until the row expires; NULL when it never does (never 0 for "no TTL").
CREATE OR REPLACE FUNCTION ttl.ttl(r anyelement) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl._seconds_left(ttl.expires_at(r))
$fn$;

CREATE OR REPLACE FUNCTION ttl.ttl(r anyelement, column_name name) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl._seconds_left(ttl.expires_at(r, column_name))
$fn$;

-- When the row was last written: ttl_written_at of a per-row TTL table, else
-- the TTL column's value (the time its TTL counts from); NULL for expression policies.
CREATE OR REPLACE FUNCTION ttl.write_time(r anyelement) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = ttl._row_table(pg_typeof(r));
    IF NOT FOUND OR ttl._base_sql(p) IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN ttl._eval_on_row(r, ttl._base_sql(p), p.relid);
END
$fn$;

-- When the value was written ('write' column TTL), or the row's base ('row').
CREATE OR REPLACE FUNCTION ttl.write_time(r anyelement, column_name name) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl oid := ttl._row_table(pg_typeof(r));
    cp ttl.column_policy;
    p ttl.policy;
    n smallint := ttl._attnum(tbl::regclass, column_name, 'column');
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF p.value_ttls THEN  -- CQL-style: the value's own write, or the INSERT's; NULL for a NULL value
        RETURN CASE WHEN n IN (SELECT ttl._value_columns(p)) THEN ttl._eval_on_row(r, ttl._cell_sql(p, n, 0), tbl) END;
    END IF;
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl::regclass, column_name, 'column');
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF cp.relative_to = 'write' THEN
        RETURN ttl._eval_on_row(r, format('pg_catalog.lower(%I)', ttl._attname(tbl, cp.track_attnum)), tbl);
    END IF;
    RETURN ttl.write_time(r);
END
$fn$;

