-- When a row or a value expires: the one definition. The engine (pg-ttl run,
-- the worker, CALL ttl.run()), partition removal, strict visibility,
-- ttl()/expires_at()/write_time(), plan and the lag metric all build their SQL
-- from these functions.
--
-- The SQL they return is safe under any search_path: every function and
-- operator is schema-qualified, so an object in a user schema cannot stand in
-- for a built-in. Calendar arithmetic is done in UTC whatever the session's
-- TimeZone (timestamp columns are read as UTC, dates as their midnight UTC), so
-- every caller computes the same instant.

-- Values per second of a Unix time unit.
CREATE OR REPLACE FUNCTION ttl._unit_scale(unit text) RETURNS numeric
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE unit WHEN 'seconds' THEN 1 WHEN 'milliseconds' THEN 1000 WHEN 'microseconds' THEN 1000000
                     WHEN 'nanoseconds' THEN 1000000000 END::numeric
$fn$;

-- Does an interval count months or years (not a fixed length: month ends clamp)?
CREATE OR REPLACE FUNCTION ttl._has_months(after interval) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT extract(month FROM after) <> 0 OR extract(year FROM after) <> 0
$fn$;

-- The instant a TTL column value `term` (SQL text) stands for plus `after`, as
-- SQL of type timestamp (UTC wall clock). Unix time is converted exactly: the
-- whole microseconds through integer day and microsecond counts (no float8),
-- and a value with a fraction of a microsecond left expires at the next
-- microsecond, never before its own instant.
CREATE OR REPLACE FUNCTION ttl._utc_expiry_sql(typ regtype, unit text, after interval, term text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    plus text := format('%L::pg_catalog.interval', coalesce(after, interval '0'));
    micros text;
    whole text;
    days text;
BEGIN
    CASE typ
        WHEN 'pg_catalog.timestamptz'::regtype THEN
            RETURN format('(pg_catalog.timezone(''UTC''::pg_catalog.text, %s) OPERATOR(pg_catalog.+) %s)', term, plus);
        WHEN 'pg_catalog.timestamp'::regtype THEN
            RETURN format('(CAST(%s AS pg_catalog.timestamp) OPERATOR(pg_catalog.+) %s)', term, plus);
        WHEN 'pg_catalog.date'::regtype THEN
            RETURN format('(CAST(%s AS pg_catalog.timestamp) OPERATOR(pg_catalog.+) %s)', term, plus);
        ELSE
            IF ttl._unit_scale(unit) IS NULL THEN
                RAISE EXCEPTION 'a Unix time column needs a unit, got %', coalesce(unit, 'none')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- Every operation in parentheses: OPERATOR(...) syntax gives all
            -- operators one precedence, left to right.
            micros := format('(CAST(%s AS pg_catalog.numeric) OPERATOR(pg_catalog.*) %s)',
                             term, 1000000 / ttl._unit_scale(unit));
            whole := format('pg_catalog.floor(%s)', micros);
            days := format('pg_catalog.floor(%s OPERATOR(pg_catalog./) 86400000000)', whole);
            RETURN format('((((CAST(''1970-01-01'' AS pg_catalog.timestamp)'
                          ' OPERATOR(pg_catalog.+) pg_catalog.make_interval(days => CAST(%1$s AS pg_catalog.int4)))'
                          ' OPERATOR(pg_catalog.+) (CAST((%2$s OPERATOR(pg_catalog.-) (%1$s OPERATOR(pg_catalog.*) 86400000000))'
                          '     AS pg_catalog.float8) OPERATOR(pg_catalog.*) CAST(''1 microsecond'' AS pg_catalog.interval)))'
                          ' OPERATOR(pg_catalog.+) %3$s)'
                          ' OPERATOR(pg_catalog.+) CASE WHEN %4$s OPERATOR(pg_catalog.>) %2$s'
                          '     THEN CAST(''1 microsecond'' AS pg_catalog.interval)'
                          '     ELSE CAST(''0'' AS pg_catalog.interval) END)',
                          days, whole, plus, micros);
    END CASE;
END
$fn$;

-- The expiry instant (timestamptz SQL) of TTL column value `term` of a column
-- of type `typ` (holding Unix time in `unit` for numeric types) after `after`.
CREATE OR REPLACE FUNCTION ttl._expiry_sql(typ regtype, unit text, after interval, term text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('pg_catalog.timezone(''UTC''::pg_catalog.text, %s)', ttl._utc_expiry_sql(typ, unit, after, term))
$fn$;

-- When a policy's rows expire, as SQL over the table's columns (timestamptz; NULL = never).
CREATE OR REPLACE FUNCTION ttl._row_expiry_sql(p ttl.policy) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p.expiration_expression IS NOT NULL THEN
        RETURN format('(%s)', p.expiration_expression);
    END IF;
    RETURN ttl._expiry_sql(p.ttl_atttypid, p.unit, p.expire_after, format('%I', ttl._attname(p.relid, p.ttl_attnum)));
END
$fn$;

-- The search_path user expressions are evaluated with: built-ins first (so a
-- user object cannot stand in for one), then the table's schema.
CREATE OR REPLACE FUNCTION ttl._table_search_path(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- (PL/pgSQL, as ttl._attname: a pass calls it three times a table)
    RETURN (SELECT format('pg_catalog, %I, pg_temp', n.nspname)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl);
END
$fn$;

-- A constant of type pg_catalog.`typ` compared with a column, as SQL: a literal, or with
-- `hide` an uncorrelated subquery, (SELECT 'value'::type), evaluated once per statement,
-- whose value the planner does not see. Key windows hide theirs (ttl.expired_sql): to
-- estimate a comparison with a constant below the column's second histogram bound,
-- PostgreSQL reads the index's lowest live entry, past every entry that deletes not yet
-- vacuumed left at its low end (the windows a pass just deleted, again for each
-- statement: ~2 ms a statement at 1% of 10M rows); a window's own bounds keep it to
-- one index range.
CREATE OR REPLACE FUNCTION ttl._constant_sql(value text, typ text, hide boolean) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format(CASE WHEN hide THEN '(SELECT %L::pg_catalog.%s)' ELSE '%L::pg_catalog.%s' END, value, typ)
$fn$;

-- `col <= threshold` in the column's own type (`typ`, Unix time in `unit` for
-- numeric types) for the values whose expiry after `after` is at or before
-- `cutoff`, so a btree on the column (or a cheap comparison per row) finds them:
-- equal to that condition when `exact`, else (months: not a fixed length)
-- implied by it. NULL when the threshold is before the start of time. A
-- threshold outside the column type's range is clamped: below it nothing
-- expires, above it every non-NULL value does. `hide_constants`: the threshold
-- hidden from the planner's estimates (ttl._constant_sql).
DROP FUNCTION IF EXISTS ttl._column_bound_sql(text, regtype, text, interval, timestamptz);
CREATE OR REPLACE FUNCTION ttl._column_bound_sql(col text, typ regtype, unit text, after interval,
                                                 cutoff timestamptz, hide_constants boolean DEFAULT false,
                                                 OUT bound text, OUT exact boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $fn$
DECLARE
    months boolean := ttl._has_months(after);
    point timestamptz;
    thr numeric;
    low numeric;
    high numeric;
BEGIN
    exact := NOT months;
    BEGIN
        -- with months, widened by the longest month-end clamp
        point := cutoff - after + CASE WHEN months THEN interval '3 days' ELSE interval '0' END;
    EXCEPTION WHEN datetime_field_overflow THEN
        point := NULL;  -- before the start of time: only the exact check can say
    END;
    IF point IS NULL THEN
        bound := NULL;
    ELSIF typ = 'timestamptz'::regtype THEN
        bound := format('%s OPERATOR(pg_catalog.<=) %s', col, ttl._constant_sql(point::text, 'timestamptz', hide_constants));
    ELSIF typ = 'timestamp'::regtype THEN
        bound := format('%s OPERATOR(pg_catalog.<=) %s', col,
                        ttl._constant_sql((point AT TIME ZONE 'UTC')::text, 'timestamp', hide_constants));
    ELSIF typ = 'date'::regtype THEN
        -- a date expires at its midnight UTC + after: midnight <= t  <=>  date <= t::date
        bound := format('%s OPERATOR(pg_catalog.<=) %s', col,
                        ttl._constant_sql(((point AT TIME ZONE 'UTC')::date)::text, 'date', hide_constants));
    ELSE
        thr := extract(epoch FROM point) * ttl._unit_scale(unit);  -- numeric: exact
        IF typ = 'numeric'::regtype THEN
            bound := format('%s OPERATOR(pg_catalog.<=) %s', col, ttl._constant_sql(thr::text, 'numeric', hide_constants));
        ELSE
            thr := floor(thr);
            low := CASE typ WHEN 'int4'::regtype THEN -2147483648 ELSE -9223372036854775808 END;
            high := CASE typ WHEN 'int4'::regtype THEN 2147483647 ELSE 9223372036854775807 END;
            -- int4 compares with an int8 threshold (a cross-type btree operator: no overflow)
            bound := CASE WHEN thr < low THEN 'false'
                          WHEN thr >= high THEN format('%s IS NOT NULL', col)
                          ELSE format('%s OPERATOR(pg_catalog.<=) %s', col,
                                      ttl._constant_sql(thr::text, 'int8', hide_constants)) END;
        END IF;
    END IF;
END
$fn$;

-- The rows of policy `tbl` expired at `cutoff`, as SQL over the table's columns:
--   expired: the exact condition (true only for rows whose expiry <= cutoff);
--   bound:   for column policies, `col <= threshold` in the column's own type
--            (ttl._column_bound_sql), implied by `expired` when months are
--            involved and equal to it otherwise, so a btree on the column can
--            find the candidates.
-- `hide_constants`: the cutoff and the threshold hidden from the planner's estimates
-- (ttl._constant_sql), for key windows.
DROP FUNCTION IF EXISTS ttl.expired_sql(oid, timestamptz);
CREATE OR REPLACE FUNCTION ttl.expired_sql(tbl oid, cutoff timestamptz, hide_constants boolean DEFAULT false,
                                           OUT expired text, OUT bound text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p.expiration_expression IS NOT NULL THEN
        expired := format('((%s) OPERATOR(pg_catalog.<=) %s)', p.expiration_expression,
                          ttl._constant_sql(cutoff::text, 'timestamptz', hide_constants));
        RETURN;
    END IF;
    SELECT c.reached, c.bound INTO expired, bound
      FROM ttl._column_reached_sql(p, p.expire_after, cutoff, hide_constants) c;
END
$fn$;

-- The rows of column policy `p` whose column is `after` or more in the past at
-- `cutoff`, as SQL over the table's columns (ttl.expired_sql with `after` =
-- ttl_expire_after; storage tiers with theirs): `bound` (ttl._column_bound_sql)
-- where it says exactly that, one comparison with a constant; else the
-- column's expiry computed per row, behind the bound when there is one.
-- `hide_constants`: as ttl._column_bound_sql's.
DROP FUNCTION IF EXISTS ttl._column_reached_sql(ttl.policy, interval, timestamptz);
CREATE OR REPLACE FUNCTION ttl._column_reached_sql(p ttl.policy, after interval, cutoff timestamptz,
                                                   hide_constants boolean DEFAULT false,
                                                   OUT reached text, OUT bound text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $fn$
DECLARE
    col text := format('%I', ttl._attname(p.relid, p.ttl_attnum));
    exact boolean;
BEGIN
    SELECT b.bound, b.exact INTO bound, exact
      FROM ttl._column_bound_sql(col, p.ttl_atttypid, p.unit, after, cutoff, hide_constants) b;
    IF NOT exact OR bound IS NULL THEN
        reached := format('(%s OPERATOR(pg_catalog.<=) %s)', ttl._expiry_sql(p.ttl_atttypid, p.unit, after, col),
                          ttl._constant_sql(cutoff::text, 'timestamptz', hide_constants));
        IF bound IS NOT NULL THEN
            reached := format('(%s AND %s)', bound, reached);
        END IF;
    ELSE
        reached := bound;
    END IF;
END
$fn$;

-- The expiry of the rows whose TTL column holds each of `bounds` (range partitions'
-- bounds, as text) under `after`, and how far the rows on one side of a bound may
-- expire from it: month arithmetic clamps at month ends (Mar 30 23:00 + 1 month
-- is later than Mar 31 00:00 + 1 month), so with months (on a time of day) the
-- rows within a day of the bound may expire up to a day on either side of it.
-- Expiry NULL where it cannot be computed (e.g. out of range at the bound). One
-- query for every bound: a table of 1,000 partitions is judged in one statement
-- (an EXECUTE per bound cost 0.03 ms each).
CREATE OR REPLACE FUNCTION ttl._bounds_expiry(tbl oid, after interval, bounds text[])
RETURNS TABLE (bound text, expiry timestamptz, slack interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    expiries timestamptz[];
    s interval;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND OR p.ttl_attnum IS NULL OR after IS NULL OR bounds IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('SELECT pg_catalog.array_agg(%s ORDER BY u.n) '
                       'FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(b, n)',
                       ttl._expiry_sql(p.ttl_atttypid, p.unit, after,
                                       format('CAST(u.b AS %s)', p.ttl_atttypid::regtype)))
           INTO expiries USING bounds;
    EXCEPTION WHEN data_exception THEN
        -- a bound out of range for the arithmetic has none: each bound judged alone
        IF cardinality(bounds) = 1 THEN
            expiries := ARRAY[NULL::timestamptz];
        ELSE
            expiries := ARRAY(SELECT (SELECT e.expiry FROM ttl._bounds_expiry(tbl, after, ARRAY[u.b]) e)
                                FROM pg_catalog.unnest(bounds) WITH ORDINALITY AS u(b, n) ORDER BY u.n);
        END IF;
    END;
    s := CASE WHEN ttl._has_months(after) AND p.ttl_atttypid <> 'date'::regtype THEN interval '1 day'
              ELSE interval '0' END;
    RETURN QUERY SELECT u.b, u.e, s FROM ROWS FROM (pg_catalog.unnest(bounds), pg_catalog.unnest(expiries)) AS u(b, e);
END
$fn$;

-- The same for one bound (none for NULL).
CREATE OR REPLACE FUNCTION ttl._bound_expiry(tbl oid, after interval, bound text, OUT expiry timestamptz,
                                             OUT slack interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT b.expiry, b.slack FROM ttl._bounds_expiry(tbl, after, ARRAY[bound]) b WHERE bound IS NOT NULL
$fn$;

-- Has every row below each of `uppers` (exclusive upper bounds of range partitions
-- on the TTL column, as text) reached `after` (from its column's time) at `cutoff`?
-- The final DELETE (ttl.bounds_expired) and the storage tiers (sql/82_tiers.sql)
-- judge partitions with it.
CREATE OR REPLACE FUNCTION ttl._bounds_reached(tbl oid, after interval, cutoff timestamptz, uppers text[])
RETURNS TABLE (bound text, reached boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT b.bound, coalesce(b.expiry OPERATOR(pg_catalog.+) b.slack OPERATOR(pg_catalog.<=) cutoff, false)
      FROM ttl._bounds_expiry(tbl, after, uppers) b
$fn$;

CREATE OR REPLACE FUNCTION ttl._bound_reached(tbl oid, after interval, cutoff timestamptz, upper text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce((SELECT b.reached FROM ttl._bounds_reached(tbl, after, cutoff, ARRAY[upper]) b), false)
$fn$;

-- Has every row below each of `uppers` expired at `cutoff`?
CREATE OR REPLACE FUNCTION ttl.bounds_expired(tbl oid, cutoff timestamptz, uppers text[])
RETURNS TABLE (bound text, expired boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT b.bound, b.reached
      FROM ttl._bounds_reached(tbl, (SELECT p.expire_after FROM ttl.policy p WHERE p.relid = tbl), cutoff, uppers) b
$fn$;

CREATE OR REPLACE FUNCTION ttl.partition_expired(tbl oid, cutoff timestamptz, upper text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce((SELECT b.expired FROM ttl.bounds_expired(tbl, cutoff, ARRAY[upper]) b), false)
$fn$;

-- Has no row at or above each of `lowers` (inclusive lower bounds of range
-- partitions on the TTL column, as text) expired at `cutoff`? Such a partition has
-- nothing to delete: the engine does not visit it.
CREATE OR REPLACE FUNCTION ttl.bounds_unexpired(tbl oid, cutoff timestamptz, lowers text[])
RETURNS TABLE (bound text, unexpired boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT b.bound, coalesce(b.expiry OPERATOR(pg_catalog.-) b.slack OPERATOR(pg_catalog.>) cutoff, false)
      FROM ttl._bounds_expiry(tbl, (SELECT p.expire_after FROM ttl.policy p WHERE p.relid = tbl), lowers) b
$fn$;

CREATE OR REPLACE FUNCTION ttl.partition_unexpired(tbl oid, cutoff timestamptz, lower text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce((SELECT b.unexpired FROM ttl.bounds_unexpired(tbl, cutoff, ARRAY[lower]) b), false)
$fn$;
