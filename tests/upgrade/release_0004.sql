-- pg_ttl schema as installed by release 7c463a5 (schema revision 0004).
-- Produced by: python tests/upgrade/make_release_fixture.py 7c463a5 tests/upgrade/release_0004.sql
-- (pg_dump --schema=ttl --inserts --no-owner, plus the event triggers a schema dump omits).
-- Loaded by tests/test_upgrade.py into a fresh database, then upgraded to head.

--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: ttl; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA ttl;


--
-- Name: _added_column_name(regclass, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._added_column_name(tbl regclass, wanted text) RETURNS name
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    wanted := left(wanted, 63);
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tbl AND attname = wanted AND NOT attisdropped) THEN
        RAISE EXCEPTION 'table % already has a column "%", which pg_ttl needs for its TTL bookkeeping', tbl, wanted
            USING ERRCODE = 'duplicate_column',
                  HINT = 'Rename that column, or use "ttl_column" / "ttl_expiration_expression" instead.';
    END IF;
    RETURN wanted;
END
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: policy; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.policy (
    relid oid NOT NULL,
    ttl_attnum smallint,
    ttl_atttypid oid,
    expiration_expression text,
    expire_after interval,
    unit text,
    job_cron text DEFAULT '@hourly'::text NOT NULL,
    job_cron_override boolean DEFAULT false NOT NULL,
    select_batch_size integer DEFAULT 10000 NOT NULL,
    delete_batch_size integer DEFAULT 1000 NOT NULL,
    select_rate_limit integer DEFAULT 0 NOT NULL,
    delete_rate_limit integer DEFAULT 0 NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    partition_action text DEFAULT 'drop'::text NOT NULL,
    detach_schema name,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    row_expiry_attnum smallint,
    row_write_attnum smallint,
    strict_visibility boolean DEFAULT false NOT NULL,
    strict_enabled_rls boolean DEFAULT false NOT NULL,
    partition_ignore_value_ttl boolean DEFAULT false NOT NULL,
    value_ttl_overrides_table_ttl boolean DEFAULT false NOT NULL,
    CONSTRAINT policy_batch_sizes CHECK (((select_batch_size >= 1) AND (delete_batch_size >= 1))),
    CONSTRAINT policy_has_expiry CHECK (((ttl_attnum IS NOT NULL) OR (expiration_expression IS NOT NULL) OR (expire_after IS NOT NULL))),
    CONSTRAINT policy_partition_action CHECK ((partition_action = ANY (ARRAY['drop'::text, 'detach'::text]))),
    CONSTRAINT policy_rate_limits CHECK (((select_rate_limit >= 0) AND (delete_rate_limit >= 0))),
    CONSTRAINT policy_unit CHECK ((unit = ANY (ARRAY['seconds'::text, 'milliseconds'::text, 'microseconds'::text, 'nanoseconds'::text])))
);


--
-- Name: _apply_option(ttl.policy, text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._apply_option(p ttl.policy, option text, value text) RETURNS ttl.policy
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    key text := ttl._option_key(option);
BEGIN
    IF value IS NULL AND key NOT IN ('expiration_expression', 'column', 'unit', 'detach_schema', 'expire_after') THEN
        RAISE EXCEPTION 'value of % must not be NULL', ttl._option_label(option)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use ttl.reset_option to restore its default.';
    END IF;
    CASE key
        WHEN 'expire_after' THEN p.expire_after := ttl._to_interval(option, value);
        WHEN 'column' THEN
            p.ttl_attnum := CASE WHEN value IS NULL THEN NULL ELSE ttl._attnum(p.relid::regclass, value, option) END;
        WHEN 'expiration_expression' THEN p.expiration_expression := nullif(btrim(value), '');
        WHEN 'unit' THEN p.unit := lower(btrim(value));
        WHEN 'job_cron' THEN p.job_cron := btrim(value);
        WHEN 'job_cron_override' THEN p.job_cron_override := ttl._to_bool(option, value);
        WHEN 'select_batch_size' THEN p.select_batch_size := ttl._to_int(option, value);
        WHEN 'delete_batch_size' THEN p.delete_batch_size := ttl._to_int(option, value);
        WHEN 'select_rate_limit' THEN p.select_rate_limit := ttl._to_int(option, value);
        WHEN 'delete_rate_limit' THEN p.delete_rate_limit := ttl._to_int(option, value);
        WHEN 'pause' THEN p.paused := ttl._to_bool(option, value);
        WHEN 'partition_action' THEN p.partition_action := lower(btrim(value));
        WHEN 'detach_schema' THEN p.detach_schema := value;
        WHEN 'strict' THEN p.strict_visibility := ttl._to_bool(option, value);
        WHEN 'partition_ignore_value_ttl' THEN p.partition_ignore_value_ttl := ttl._to_bool(option, value);
        WHEN 'value_ttl_overrides_table_ttl' THEN p.value_ttl_overrides_table_ttl := ttl._to_bool(option, value);
        ELSE
            RAISE EXCEPTION 'unknown TTL option %', ttl._option_label(option)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Accepted options: ttl_' || array_to_string(ttl.option_names(), ', ttl_') || '.';
    END CASE;
    RETURN p;
END
$$;


--
-- Name: _attname(oid, smallint); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._attname(tbl oid, n smallint) RETURNS name
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT attname FROM pg_attribute WHERE attrelid = tbl AND attnum = n AND NOT attisdropped
$$;


--
-- Name: _attnum(regclass, text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._attnum(tbl regclass, column_name text, option text) RETURNS smallint
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n smallint;
BEGIN
    SELECT attnum INTO n FROM pg_attribute
     WHERE attrelid = tbl AND attname = column_name AND attnum > 0 AND NOT attisdropped;
    IF n IS NULL THEN
        RAISE EXCEPTION 'column "%" of table % does not exist (%)', column_name, tbl, ttl._option_label(option)
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN n;
END
$$;


--
-- Name: _base_sql(ttl.policy); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._base_sql(p ttl.policy) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    col text;
    typ oid;
BEGIN
    IF p.row_write_attnum IS NOT NULL THEN
        RETURN format('%I', ttl._attname(p.relid, p.row_write_attnum));
    END IF;
    IF p.ttl_attnum IS NULL THEN
        RETURN NULL;
    END IF;
    col := format('%I', ttl._attname(p.relid, p.ttl_attnum));
    typ := p.ttl_atttypid;
    RETURN CASE
        WHEN typ = 'timestamptz'::regtype THEN col
        WHEN typ = 'timestamp'::regtype THEN format($f$(%s AT TIME ZONE 'UTC')$f$, col)
        WHEN typ = 'date'::regtype THEN format($f$(%s::timestamp AT TIME ZONE 'UTC')$f$, col)
        ELSE format('pg_catalog.to_timestamp(%s::float8 / %s)', col,
                    CASE p.unit WHEN 'seconds' THEN '1' WHEN 'milliseconds' THEN '1e3'
                                WHEN 'microseconds' THEN '1e6' ELSE '1e9' END)
    END;
END
$_$;


--
-- Name: _check_owner(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._check_owner(tbl regclass) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    owner oid;
BEGIN
    SELECT c.relowner INTO owner FROM pg_class c WHERE c.oid = tbl;
    IF owner IS NULL THEN
        RAISE EXCEPTION 'table with oid % does not exist', tbl::oid USING ERRCODE = 'undefined_table';
    END IF;
    IF NOT pg_has_role(current_user, owner, 'MEMBER') THEN
        RAISE EXCEPTION 'must be owner of table % to change its TTL', tbl
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('Only the owner (%s) or a member of the owning role may.', owner::regrole);
    END IF;
END
$$;


--
-- Name: _check_table(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._check_table(tbl regclass) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c record;
BEGIN
    SELECT relkind, relispartition, relpersistence INTO c FROM pg_class WHERE oid = tbl;
    IF c.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '"%" is not a table', tbl USING ERRCODE = 'wrong_object_type',
            HINT = 'TTL applies to ordinary and partitioned tables.';
    END IF;
    IF c.relispartition THEN
        RAISE EXCEPTION 'table % is a partition of %', tbl,
            (SELECT inhparent::regclass FROM pg_inherits WHERE inhrelid = tbl)
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Enable TTL on the partitioned table; every partition follows it.';
    END IF;
    IF c.relpersistence = 't' THEN
        RAISE EXCEPTION 'table % is temporary', tbl USING ERRCODE = 'wrong_object_type',
            HINT = 'The worker cannot see temporary tables.';
    END IF;
    PERFORM ttl._check_owner(tbl);
END
$$;


--
-- Name: _claim_key(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._claim_key(unit oid) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT (x'74746C00'::bigint << 32) | unit::bigint
$$;


--
-- Name: _column_policy_after(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._column_policy_after() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl oid := CASE WHEN TG_OP = 'DELETE' THEN OLD.relid ELSE NEW.relid END;
BEGIN
    PERFORM ttl._sync_table(tbl);
    IF TG_OP <> 'INSERT' AND OLD.track_attnum IS NOT NULL
       AND (TG_OP = 'DELETE' OR NEW.track_attnum IS DISTINCT FROM OLD.track_attnum) THEN
        PERFORM ttl._drop_added_column(tbl, OLD.track_attnum);
    END IF;
    RETURN NULL;
END
$$;


--
-- Name: _column_policy_mode(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._column_policy_mode() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl regclass := NEW.relid::regclass;
    p ttl.policy;
    col name;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = NEW.relid;
    IF NEW.relative_to IS NULL THEN
        -- Default: the table's TTL base when it has one, else the value's write time.
        NEW.relative_to := CASE WHEN FOUND AND ttl._base_sql(p) IS NOT NULL THEN 'row' ELSE 'write' END;
    END IF;
    IF NEW.relative_to NOT IN ('row', 'write') THEN
        RAISE EXCEPTION 'column TTL of table %: relative_to must be row or write, got "%"', tbl, NEW.relative_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.relative_to = 'row' AND (p.relid IS NULL OR ttl._base_sql(p) IS NULL) THEN
        RAISE EXCEPTION 'column TTL of table %: relative_to = row needs a table TTL with "ttl_column" or per-row TTL', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use relative_to => ''write'' (from the value''s own write time).';
    END IF;
    IF NEW.relative_to = 'write' THEN
        IF TG_OP = 'UPDATE' AND OLD.track_attnum IS NOT NULL AND ttl._attname(NEW.relid, OLD.track_attnum) IS NOT NULL THEN
            NEW.track_attnum := OLD.track_attnum;
        ELSE
            PERFORM ttl._check_table(tbl);
            col := ttl._added_column_name(tbl, 'ttl_cell_' || ttl._attname(NEW.relid, NEW.attnum));
            -- The missing value for existing rows: tracked from now.
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I tstzrange DEFAULT pg_catalog.tstzrange(pg_catalog.now(), %s, %L)',
                           tbl, col, ttl._expiry_default_sql(NEW.expire_after, true),
                           '[)');
            NEW.track_attnum := ttl._attnum(tbl, col, 'column');
        END IF;
    ELSE
        NEW.track_attnum := NULL;
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: _cron_field(text, integer); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._cron_field(raw text, idx integer, OUT vals integer[], OUT err text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    fname CONSTANT text := (ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'])[idx];
    lo CONSTANT int := (ARRAY[0, 0, 1, 1, 0])[idx];
    hi CONSTANT int := (ARRAY[59, 23, 31, 12, 7])[idx];   -- largest value one may write
    top CONSTANT int := (ARRAY[59, 23, 31, 12, 6])[idx];  -- where "*" and "a/n" end
    field CONSTANT text := translate(raw, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    raw_items CONSTANT text[] := string_to_array(raw, ',');
    i int := 0;
    item text;
    shown text;  -- the item as written, for messages
    m text[];
    r text[];  -- the same groups as written
    a int;
    b int;
    step int;
    res int[] := '{}';
BEGIN
    IF field = '*' THEN
        vals := ARRAY(SELECT generate_series(lo, top));
        RETURN;
    END IF;
    FOREACH item IN ARRAY string_to_array(field, ',') LOOP
        i := i + 1;
        shown := raw_items[i];
        IF item = '' THEN
            err := format('%s field "%s" has an empty list item', fname, raw);
            RETURN;
        END IF;
        IF item = '*' THEN
            err := format('%s field "%s": "*" must stand alone, not in a list', fname, raw);
            RETURN;
        END IF;
        m := regexp_match(item, '^(\*|[0-9]+|[a-z]+)(?:-([0-9]+|[a-z]+))?(?:/([0-9]+))?$');
        IF m IS NULL OR (m[1] = '*' AND (m[2] IS NOT NULL OR m[3] IS NULL)) THEN
            err := format('%s item "%s" %s', fname, shown, CASE
                WHEN item ~ '[?]' THEN 'uses "?", which is not supported (use *)'
                WHEN item ~ '#' THEN 'uses "#" (nth weekday), which is not supported'
                WHEN item ~ '^-' THEN 'is negative'
                WHEN item ~ '^[hr]([(/]|$)' THEN 'uses H/R (hashed or random values), which is not supported'
                WHEN idx IN (3, 5) AND item ~ '[lw]' THEN 'uses L or W, which is not supported'
                WHEN item ~ '/$' THEN 'has an empty step'
                WHEN item ~ '/.*/' THEN 'has more than one step'
                ELSE 'is not a value, a-b range, */n or a/n step'
            END);
            RETURN;
        END IF;
        r := regexp_match(shown, '^(\*|[0-9]+|[a-z]+)(?:-([0-9]+|[a-z]+))?(?:/([0-9]+))?$', 'i');
        -- bounds of this item
        IF m[1] = '*' THEN
            a := lo;
            b := top;
        ELSE
            FOR k IN 1..2 LOOP
                CONTINUE WHEN m[k] IS NULL;
                a := ttl._cron_value(m[k], idx);
                IF a IS NULL THEN
                    err := CASE
                        WHEN idx = 4 THEN format('unknown month name "%s" (use jan-dec or 1-12)', r[k])
                        WHEN idx = 5 THEN format('unknown day-of-week name "%s" (use sun-sat or 0-7)', r[k])
                        WHEN idx = 3 AND m[k] = 'l' THEN format('day-of-month item "%s" uses L, which is not supported', shown)
                        WHEN m[k] ~ '^[hr]$' THEN format('%s item "%s" uses H/R (hashed or random values), which is not supported', fname, shown)
                        ELSE format('%s value "%s" is not a number', fname, r[k])
                    END;
                    RETURN;
                END IF;
                IF a < lo OR a > hi THEN
                    err := format('%s value %s out of range %s-%s', fname, r[k], lo, hi);
                    RETURN;
                END IF;
            END LOOP;
            a := ttl._cron_value(m[1], idx);
            IF m[2] IS NOT NULL THEN
                b := ttl._cron_value(m[2], idx);
                IF a > b THEN
                    err := format('%s range "%s" is reversed (croniter would wrap around); write %s', fname, shown,
                                  CASE WHEN idx = 5 AND b = 0 THEN format('"%s-7"', r[1])
                                       ELSE format('two ranges, e.g. "%s-%s,%s-%s"', r[1], top, lo, r[2]) END);
                    RETURN;
                ELSIF a = b THEN
                    err := format('%s range "%s" has equal bounds (croniter reads it as the whole field); write "%s"',
                                  fname, shown, r[1]);
                    RETURN;
                END IF;
            ELSIF m[3] IS NOT NULL THEN
                IF a > top THEN
                    err := format('%s item "%s": 7 cannot start a step, write "0/%s"', fname, shown, r[3]);
                    RETURN;
                END IF;
                b := top;
            ELSE
                b := a;
            END IF;
        END IF;
        step := 1;
        IF m[3] IS NOT NULL THEN
            step := ttl._cron_value(m[3], 0);
            IF step = 0 THEN
                err := format('%s item "%s" has step 0, the step must be at least 1', fname, shown);
                RETURN;
            END IF;
            step := least(step, 100);  -- any step wider than the field gives just the start
        END IF;
        res := res || ARRAY(SELECT generate_series(a, b, step));
    END LOOP;
    vals := ARRAY(SELECT DISTINCT CASE WHEN idx = 5 AND v = 7 THEN 0 ELSE v END AS d
                  FROM unnest(res) AS v ORDER BY d);
END
$_$;


--
-- Name: _cron_parse(text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._cron_parse(expr text, OUT err text, OUT minutes integer[], OUT hours integer[], OUT doms integer[], OUT months integer[], OUT dows integer[], OUT dom_any boolean, OUT dow_any boolean) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    w text;  -- whitespace normalised, as written
    e text;  -- lower case
    bad text;
    fields text[];
    f record;
    i int;
BEGIN
    IF expr IS NULL OR expr = '' THEN
        err := 'must not be empty';
        RETURN;
    END IF;
    -- croniter splits on ASCII whitespace only and lower-cases everything.
    w := translate(expr, chr(9) || chr(10) || chr(11) || chr(12) || chr(13), '     ');
    bad := substring(w FROM '[^ -~]');
    IF bad IS NOT NULL THEN
        err := format('contains the unsupported character %s (U+%s)', quote_literal(bad), lpad(to_hex(ascii(bad)), 4, '0'));
        RETURN;
    END IF;
    IF btrim(w) = '' THEN
        err := 'must not be empty';
        RETURN;
    END IF;
    e := translate(w, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    IF left(btrim(e), 1) = '@' THEN
        IF btrim(e) NOT IN ('@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually') THEN
            err := format('unknown shortcut "%s" (use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)', btrim(expr));
            RETURN;
        ELSIF e <> btrim(e) THEN
            err := format('"%s" must be written without surrounding whitespace', btrim(expr));
            RETURN;
        END IF;
        w := CASE e
            WHEN '@hourly' THEN '0 * * * *'
            WHEN '@daily' THEN '0 0 * * *'
            WHEN '@midnight' THEN '0 0 * * *'
            WHEN '@weekly' THEN '0 0 * * 0'
            WHEN '@monthly' THEN '0 0 1 * *'
            ELSE '0 0 1 1 *'
        END;
    END IF;
    fields := regexp_split_to_array(btrim(w), ' +');
    IF cardinality(fields) <> 5 THEN
        err := format('must have 5 fields (minute hour day-of-month month day-of-week), got %s%s', cardinality(fields),
                      CASE WHEN cardinality(fields) IN (6, 7) THEN ' (seconds and year fields are not supported)' ELSE '' END);
        RETURN;
    END IF;
    FOR i IN 1..5 LOOP
        f := ttl._cron_field(fields[i], i);
        IF f.err IS NOT NULL THEN
            err := f.err;
            RETURN;
        END IF;
        CASE i
            WHEN 1 THEN minutes := f.vals;
            WHEN 2 THEN hours := f.vals;
            WHEN 3 THEN doms := f.vals;
            WHEN 4 THEN months := f.vals;
            ELSE dows := f.vals;
        END CASE;
    END LOOP;
    -- croniter's notion of an unrestricted day field (see the header).
    dom_any := fields[3] = '*' OR (cardinality(doms) = 31 AND strpos(fields[5], '*') > 0);
    dow_any := fields[5] = '*' OR (cardinality(dows) = 7 AND strpos(fields[3], '*') > 0);
    -- Only day-of-month alone can select no day at all: every month has every weekday.
    IF NOT dom_any AND dow_any
       AND NOT EXISTS (SELECT FROM unnest(months) AS mo
                       WHERE doms[1] <= (ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[mo]) THEN
        err := format('day-of-month "%s" never occurs in month "%s", the schedule would never run', fields[3], fields[4]);
        RETURN;
    END IF;
END
$$;


--
-- Name: _cron_value(text, integer); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._cron_value(token text, idx integer) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    pos int;
BEGIN
    IF token ~ '^[0-9]+$' THEN
        token := ltrim(token, '0');
        RETURN CASE WHEN token = '' THEN 0 WHEN length(token) > 6 THEN 999999 ELSE token::int END;
    END IF;
    IF idx = 4 THEN
        pos := array_position(ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], token);
        RETURN pos;
    ELSIF idx = 5 THEN
        pos := array_position(ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], token);
        RETURN pos - 1;
    END IF;
    RETURN NULL;
END
$_$;


--
-- Name: _default_policy(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._default_policy(tbl regclass) RETURNS ttl.policy
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    p.relid := tbl;
    p.job_cron := coalesce((SELECT value FROM ttl.settings WHERE name = 'default_job_cron'), '@hourly');
    p.job_cron_override := false;
    p.select_batch_size := 10000;
    p.delete_batch_size := 1000;
    p.select_rate_limit := 0;
    p.delete_rate_limit := 0;
    p.paused := false;
    p.partition_action := 'drop';
    p.created_at := now();
    p.updated_at := now();
    RETURN p;
END
$$;


--
-- Name: _drop_added_column(oid, smallint); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._drop_added_column(tbl oid, n smallint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF n IS NOT NULL AND EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) AND ttl._attname(tbl, n) IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s DROP COLUMN %I', tbl::regclass, ttl._attname(tbl, n));
    END IF;
END
$$;


--
-- Name: _drop_live_view(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._drop_live_view(tbl oid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    v regclass;
BEGIN
    FOR v IN
        SELECT DISTINCT r.ev_class::regclass FROM pg_rewrite r JOIN pg_depend d ON d.objid = r.oid
          JOIN pg_class c ON c.oid = r.ev_class
         WHERE d.refobjid = tbl AND d.classid = 'pg_rewrite'::regclass
           AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'ttl_live')
    LOOP
        EXECUTE format('DROP VIEW %s', v);
    END LOOP;
END
$$;


--
-- Name: _eval_on_row(anyelement, text, oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._eval_on_row(r anyelement, expr text, tbl oid) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;


--
-- Name: _expired_sql(oid, timestamp with time zone); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._expired_sql(tbl oid, cutoff timestamp with time zone) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
$$;


--
-- Name: _expiry_default_sql(interval, boolean); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._expiry_default_sql(default_ttl interval, override_wins boolean) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT format(
        $f$CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL
                     THEN pg_catalog.now() + %1$L::interval
                WHEN pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval = '0'::interval THEN NULL
                ELSE pg_catalog.now() + %2$s END$f$,
        default_ttl::text,
        CASE WHEN override_wins THEN $f$pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval$f$
             ELSE format($f$GREATEST(pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval, %L::interval)$f$,
                         default_ttl::text) END)
$_$;


--
-- Name: _expression_error(regclass, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._expression_error(tbl regclass, expr text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    typ regtype;
    plan text;
BEGIN
    IF expr IS NULL OR btrim(expr) = '' THEN
        RETURN 'must not be empty';
    END IF;
    IF position(';' IN expr) > 0 THEN
        RETURN 'must be a single expression (no ";")';
    END IF;
    -- Names in the expression resolve in the table's own schema, then pg_catalog;
    -- the engine evaluates it with the same search_path. (The function's SET
    -- clause restores the caller's search_path on exit.)
    PERFORM set_config('search_path',
                       format('%I, pg_catalog, pg_temp',
                              (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                WHERE c.oid = tbl)),
                       true);
    BEGIN
        -- One row of NULLs, so that pg_typeof() reports the expression's type.
        EXECUTE format('SELECT pg_typeof((%s)) FROM (SELECT) AS ttl_one LEFT JOIN ONLY %s ON false', expr, tbl)
            INTO typ;
        EXECUTE format('EXPLAIN (FORMAT JSON, COSTS OFF) SELECT (%s) FROM ONLY %s', expr, tbl) INTO plan;
    EXCEPTION WHEN OTHERS THEN
        RETURN format('is not a valid expression over the table''s columns: %s', SQLERRM);
    END;
    IF plan ~ '"(SubPlan|InitPlan|Aggregate|WindowAgg|ProjectSet)' THEN
        RETURN 'must not contain subqueries, aggregates, window or set-returning functions';
    END IF;
    IF typ IS DISTINCT FROM 'timestamptz'::regtype THEN
        RETURN format('must be of type timestamp with time zone, not %s', typ);
    END IF;
    RETURN NULL;
END
$$;


--
-- Name: _get_policy(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._get_policy(tbl regclass) RETURNS ttl.policy
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no TTL', tbl USING ERRCODE = 'undefined_object',
            HINT = format('Enable it first: SELECT ttl.enable(%L, expire_after => ..., column_name => ...).', tbl::text);
    END IF;
    RETURN p;
END
$$;


--
-- Name: _on_ddl_end(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._on_ddl_end() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p record;
    c record;
    err text;
BEGIN
    FOR p IN
        SELECT pol.*, a.atttypid AS now_typid, a.attname
          FROM ttl.policy pol
          LEFT JOIN pg_attribute a ON a.attrelid = pol.relid AND a.attnum = pol.ttl_attnum AND NOT a.attisdropped
         WHERE pol.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
    LOOP
        IF p.ttl_attnum IS NOT NULL AND p.now_typid IS DISTINCT FROM p.ttl_atttypid THEN
            RAISE EXCEPTION 'cannot change the type of column "%" of table %: it is the TTL column', p.attname,
                p.relid::regclass
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = format('Disable TTL first: SELECT ttl.disable(%L);', p.relid::regclass::text);
        END IF;
        IF p.expiration_expression IS NOT NULL THEN
            err := ttl._expression_error(p.relid::regclass, p.expiration_expression);
            IF err IS NOT NULL THEN
                RAISE EXCEPTION 'this change breaks the "ttl_expiration_expression" of table %: it %', p.relid::regclass, err
                    USING ERRCODE = 'dependent_objects_still_exist',
                          HINT = format('Disable TTL first (SELECT ttl.disable(%L);) or change the expression.',
                                        p.relid::regclass::text);
            END IF;
        END IF;
    END LOOP;
    FOR c IN
        SELECT cp.relid, cp.attnum, cp.atttypid, a.atttypid AS now_typid, a.attname
          FROM ttl.column_policy cp
          JOIN pg_attribute a ON a.attrelid = cp.relid AND a.attnum = cp.attnum
         WHERE cp.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
           AND a.atttypid IS DISTINCT FROM cp.atttypid
    LOOP
        RAISE EXCEPTION 'cannot change the type of column "%" of table %: it has a column TTL', c.attname,
            c.relid::regclass
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable its TTL first: SELECT ttl.disable_column(%L, %L);',
                                c.relid::regclass::text, c.attname);
    END LOOP;
END
$$;


--
-- Name: _on_sql_drop(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT o.objid, o.objsubid, o.object_identity
          FROM pg_event_trigger_dropped_objects() o
         WHERE o.object_type = 'table column'
           AND (EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = o.objid AND p.ttl_attnum = o.objsubid)
                OR EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = o.objid AND c.attnum = o.objsubid))
    LOOP
        RAISE EXCEPTION 'cannot drop column %: it is used by a TTL policy', d.object_identity
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable TTL first: SELECT ttl.disable(%L);', d.objid::regclass::text);
    END LOOP;

    DELETE FROM ttl.policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    DELETE FROM ttl.column_policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
END
$$;


--
-- Name: _option_key(text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._option_key(option text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN lower(btrim(option)) LIKE 'ttl\_%'
                THEN substr(lower(btrim(option)), 5)
                ELSE lower(btrim(option)) END
$$;


--
-- Name: _option_label(text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._option_label(option text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT '"ttl_' || ttl._option_key(option) || '"'
$$;


--
-- Name: _policy_after(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._policy_after() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl oid := CASE WHEN TG_OP = 'DELETE' THEN OLD.relid ELSE NEW.relid END;
BEGIN
    -- Only what changes expiry touches the user's table (ALTER TABLE locks it).
    IF TG_OP = 'UPDATE'
       AND (OLD.ttl_attnum, OLD.expiration_expression, OLD.expire_after, OLD.unit, OLD.row_expiry_attnum,
            OLD.strict_visibility, OLD.value_ttl_overrides_table_ttl)
           IS NOT DISTINCT FROM
           (NEW.ttl_attnum, NEW.expiration_expression, NEW.expire_after, NEW.unit, NEW.row_expiry_attnum,
            NEW.strict_visibility, NEW.value_ttl_overrides_table_ttl) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.row_expiry_attnum IS NULL AND NOT NEW.strict_visibility
       AND NOT EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = tbl) THEN
        RETURN NULL;
    END IF;
    -- Strict objects first: they may read the columns about to go.
    IF TG_OP = 'DELETE' THEN
        PERFORM ttl._strict_sync(tbl);
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.row_expiry_attnum IS NOT NULL
       AND (TG_OP = 'DELETE' OR NEW.row_expiry_attnum IS NULL) THEN
        PERFORM ttl._sync_table(tbl);
        PERFORM ttl._drop_added_column(tbl, OLD.row_expiry_attnum);
        PERFORM ttl._drop_added_column(tbl, OLD.row_write_attnum);
    END IF;
    PERFORM ttl._sync_table(tbl);
    RETURN NULL;
END
$$;


--
-- Name: _policy_row_mode(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._policy_row_mode() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl regclass := NEW.relid::regclass;
    managed text;
    col name;
BEGIN
    NEW.strict_visibility := coalesce(NEW.strict_visibility, false);
    NEW.strict_enabled_rls := coalesce(NEW.strict_enabled_rls, false);
    NEW.partition_ignore_value_ttl := coalesce(NEW.partition_ignore_value_ttl, false);
    NEW.value_ttl_overrides_table_ttl := coalesce(NEW.value_ttl_overrides_table_ttl, false);

    IF NEW.row_expiry_attnum IS NOT NULL THEN
        managed := format('%I', ttl._attname(NEW.relid, NEW.row_expiry_attnum));
        IF NEW.ttl_attnum IS NOT NULL OR NEW.expiration_expression IS DISTINCT FROM managed
           OR NEW.expire_after IS NULL THEN
            -- Leaving per-row mode: the columns go in the AFTER trigger.
            IF NEW.expiration_expression IS NOT DISTINCT FROM managed OR NEW.expiration_expression IS NULL THEN
                NEW.expiration_expression := NULL;
            END IF;
            NEW.row_expiry_attnum := NULL;
            NEW.row_write_attnum := NULL;
        END IF;
    END IF;

    IF NEW.row_expiry_attnum IS NULL AND NEW.ttl_attnum IS NULL AND NEW.expiration_expression IS NULL
       AND NEW.expire_after IS NOT NULL AND NEW.expire_after > interval '0' THEN
        PERFORM ttl._check_table(tbl);
        -- Entering per-row mode. Existing rows get a non-volatile default's
        -- "missing value" (no table rewrite): they expire expire_after from now.
        IF TG_OP = 'UPDATE' AND OLD.row_expiry_attnum IS NOT NULL
           AND ttl._attname(NEW.relid, OLD.row_expiry_attnum) IS NOT NULL THEN
            NEW.row_expiry_attnum := OLD.row_expiry_attnum;
            NEW.row_write_attnum := OLD.row_write_attnum;
        ELSE
            col := ttl._added_column_name(tbl, 'ttl_expires_at');
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I timestamptz DEFAULT %s', tbl, col,
                           ttl._expiry_default_sql(NEW.expire_after, NEW.value_ttl_overrides_table_ttl));
            NEW.row_expiry_attnum := ttl._attnum(tbl, col, 'column');
            col := ttl._added_column_name(tbl, 'ttl_written_at');
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I timestamptz DEFAULT pg_catalog.now()', tbl, col);
            NEW.row_write_attnum := ttl._attnum(tbl, col, 'column');
        END IF;
        NEW.expiration_expression := format('%I', ttl._attname(NEW.relid, NEW.row_expiry_attnum));
    END IF;

    IF NEW.strict_visibility AND (TG_OP = 'INSERT' OR NOT OLD.strict_visibility) THEN
        -- Remember whether pg_ttl turned row security on, to turn it off again.
        NEW.strict_enabled_rls := NOT (SELECT relrowsecurity FROM pg_class WHERE oid = NEW.relid);
    ELSIF NOT NEW.strict_visibility THEN
        NEW.strict_enabled_rls := false;
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: _refresh_cell(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._refresh_cell() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF current_setting('pg_ttl.expiring', true) = 'on' THEN
        RETURN NEW;
    END IF;
    IF (to_jsonb(NEW) -> TG_ARGV[0]) IS NOT DISTINCT FROM (to_jsonb(OLD) -> TG_ARGV[0]) THEN
        NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0],
                   tstzrange(now(), ttl.row_expires_at(TG_ARGV[1]::interval, TG_ARGV[2]::boolean), '[)')));
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: _refresh_row_expiry(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._refresh_row_expiry() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    patch jsonb;
    n jsonb;
    o jsonb;
    override_for_values boolean := false;
    ovr interval;
BEGIN
    -- The engine nulling expired values must not extend the row's life.
    IF current_setting('pg_ttl.expiring', true) = 'on' THEN
        RETURN NEW;
    END IF;
    -- The usual case, the columns pg_ttl adds and no write-time value TTLs: plain
    -- field access (the jsonb path below costs ~4x a bulk UPDATE of a narrow table).
    IF TG_NARGS = 4 AND TG_ARGV[0] = 'ttl_expires_at' AND TG_ARGV[1] = 'ttl_written_at' THEN
        NEW.ttl_written_at := now();
        IF NEW.ttl_expires_at IS NOT DISTINCT FROM OLD.ttl_expires_at THEN
            ovr := nullif(current_setting('pg_ttl.row_ttl', true), '')::interval;
            IF ovr IS NULL THEN
                NEW.ttl_expires_at := now() + TG_ARGV[2]::interval;
            ELSE
                NEW.ttl_expires_at := ttl.row_expires_at(TG_ARGV[2]::interval, TG_ARGV[3]::boolean);
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    n := to_jsonb(NEW);
    o := to_jsonb(OLD);
    -- UPDATE ... USING TTL SET <column with a value TTL>: the TTL is the
    -- values' (their triggers, which sort first, have used it), not the row's.
    FOR i IN 4 .. TG_NARGS - 1 LOOP
        IF (n -> TG_ARGV[i]) IS DISTINCT FROM (o -> TG_ARGV[i]) THEN
            override_for_values := true;
        END IF;
    END LOOP;
    patch := jsonb_build_object(TG_ARGV[1], now());
    IF (n -> TG_ARGV[0]) IS NOT DISTINCT FROM (o -> TG_ARGV[0]) THEN
        patch := patch || jsonb_build_object(TG_ARGV[0],
            CASE WHEN override_for_values THEN now() + TG_ARGV[2]::interval
                 ELSE ttl.row_expires_at(TG_ARGV[2]::interval, TG_ARGV[3]::boolean) END);
    END IF;
    NEW := jsonb_populate_record(NEW, patch);
    RETURN NEW;
END
$$;


--
-- Name: _row_expiry_sql(ttl.policy); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._row_expiry_sql(p ttl.policy) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF p.expiration_expression IS NOT NULL THEN
        RETURN format('(%s)', p.expiration_expression);
    END IF;
    RETURN format('(%s + %L::interval)', ttl._base_sql(p), p.expire_after::text);
END
$$;


--
-- Name: _row_table(regtype); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._row_table(typ regtype) RETURNS oid
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
$$;


--
-- Name: _row_ttl_override(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._row_ttl_override() RETURNS interval
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT nullif(current_setting('pg_ttl.row_ttl', true), '')::interval
$$;


--
-- Name: _save_policy(ttl.policy, boolean); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._save_policy(p ttl.policy, is_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF is_new THEN
        INSERT INTO ttl.policy SELECT p.*;
    ELSE
        UPDATE ttl.policy SET (ttl_attnum, ttl_atttypid, expiration_expression, expire_after, unit, job_cron,
                               job_cron_override, select_batch_size, delete_batch_size, select_rate_limit,
                               delete_rate_limit, paused, partition_action, detach_schema,
                               strict_visibility, partition_ignore_value_ttl, value_ttl_overrides_table_ttl)
            = (p.ttl_attnum, p.ttl_atttypid, p.expiration_expression, p.expire_after, p.unit, p.job_cron,
               p.job_cron_override, p.select_batch_size, p.delete_batch_size, p.select_rate_limit,
               p.delete_rate_limit, p.paused, p.partition_action, p.detach_schema,
               p.strict_visibility, p.partition_ignore_value_ttl, p.value_ttl_overrides_table_ttl)
         WHERE relid = p.relid;
    END IF;
    -- Wake up workers (they also poll).
    PERFORM pg_notify('pg_ttl', p.relid::regclass::text);
END
$$;


--
-- Name: _seconds_left(timestamp with time zone); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._seconds_left(expires timestamp with time zone) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN expires IS NULL THEN NULL
                ELSE greatest(ceil(extract(epoch FROM expires - now())), 0)::bigint END
$$;


--
-- Name: _strict_sync(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._strict_sync(tbl oid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
    want boolean;
    stmt text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        RETURN;
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    want := FOUND AND p.strict_visibility;
    IF EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = tbl AND polname = 'ttl_strict') THEN
        EXECUTE format('DROP POLICY ttl_strict ON %s', tbl::regclass);
    END IF;
    IF want THEN
        stmt := format('CREATE POLICY ttl_strict ON %s AS RESTRICTIVE FOR SELECT USING (%s)',
                       tbl::regclass, ttl._visible_sql(p));
        -- Names in a user expression resolve in the table's schema.
        PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
        EXECUTE stmt;
        PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
        IF p.strict_enabled_rls THEN
            EXECUTE format('DROP POLICY IF EXISTS ttl_strict_allow ON %s', tbl::regclass);
            EXECUTE format('CREATE POLICY ttl_strict_allow ON %s AS PERMISSIVE FOR ALL USING (true) WITH CHECK (true)',
                           tbl::regclass);
            EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl::regclass);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = tbl AND polname = 'ttl_strict_allow') THEN
        EXECUTE format('DROP POLICY ttl_strict_allow ON %s', tbl::regclass);
        IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = tbl) THEN
            EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', tbl::regclass);
        END IF;
    END IF;
    PERFORM ttl._strict_view_sync(tbl);
END
$$;


--
-- Name: _strict_view_sync(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._strict_view_sync(tbl oid) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
    has_policy boolean;
    view_name name;
    cols text;
    owner name;
    stmt text;
BEGIN
    SELECT relname, relowner::regrole::name INTO view_name, owner FROM pg_class WHERE oid = tbl;
    IF view_name IS NULL THEN
        RETURN;
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    has_policy := FOUND;
    -- Drop the view this table had (found by its dependency, so renames are fine).
    PERFORM ttl._drop_live_view(tbl);
    IF NOT (has_policy AND p.strict_visibility) OR NOT EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = tbl) THEN
        IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'ttl_live')
           AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = 'ttl_live') THEN
            DROP SCHEMA ttl_live;
        END IF;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'ttl_live') THEN
        CREATE SCHEMA ttl_live;
        REVOKE CREATE ON SCHEMA ttl_live FROM PUBLIC;
        GRANT USAGE ON SCHEMA ttl_live TO PUBLIC;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'ttl_live' AND c.relname = view_name) THEN
        RAISE EXCEPTION 'table %: ttl_live.% already shows another table with strict visibility', tbl::regclass, view_name
            USING ERRCODE = 'duplicate_table', HINT = 'Rename one of the two tables.';
    END IF;
    SELECT string_agg(
             CASE WHEN c.attnum IS NULL OR ttl._value_expiry_sql(tbl, a.attnum) IS NULL THEN format('t.%I', a.attname)
                  -- NULL also for NOT NULL columns: a DEFAULT such as nextval() must not run on reads.
                  ELSE format('CASE WHEN %s <= pg_catalog.now() THEN NULL::%s ELSE t.%I END AS %I',
                              ttl._value_expiry_sql(tbl, a.attnum), format_type(a.atttypid, a.atttypmod),
                              a.attname, a.attname) END,
             ', ' ORDER BY a.attnum)
      INTO cols
      FROM pg_attribute a
      LEFT JOIN ttl.column_policy c ON c.relid = tbl AND c.attnum = a.attnum
     WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped;
    stmt := format('CREATE VIEW ttl_live.%I WITH (security_invoker = true) AS SELECT %s FROM %s AS t WHERE %s',
                   view_name, cols, tbl::regclass, ttl._visible_sql(p));
    -- Only parsed here (never run as the definer); names resolve in the table's schema.
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE stmt;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    EXECUTE format('ALTER VIEW ttl_live.%I OWNER TO %I', view_name, owner);
    -- The reader's own privileges on the table still apply (security_invoker).
    EXECUTE format('GRANT SELECT ON ttl_live.%I TO PUBLIC', view_name);
END
$$;


--
-- Name: _sync_table(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._sync_table(tbl oid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    p ttl.policy;
    cp record;
    wins boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        RETURN;  -- the table is being dropped
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    wins := coalesce(p.value_ttl_overrides_table_ttl, false);

    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'ttl_row_expiry') THEN
        EXECUTE format('DROP TRIGGER ttl_row_expiry ON %s', tbl::regclass);
    END IF;
    IF p.row_expiry_attnum IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', tbl::regclass,
                       ttl._attname(tbl, p.row_expiry_attnum), ttl._expiry_default_sql(p.expire_after, wins));
        EXECUTE format('CREATE TRIGGER ttl_row_expiry BEFORE UPDATE ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION ttl._refresh_row_expiry(%L, %L, %L, %L%s)', tbl::regclass,
                       ttl._attname(tbl, p.row_expiry_attnum), ttl._attname(tbl, p.row_write_attnum),
                       p.expire_after::text, wins::text,
                       (SELECT string_agg(format(', %L', ttl._attname(tbl, c.track_attnum)), '' ORDER BY c.attnum)
                          FROM ttl.column_policy c WHERE c.relid = tbl AND c.relative_to = 'write'));
    END IF;

    -- One BEFORE UPDATE OF trigger per tracked column, named by its attnum.
    FOR cp IN
        SELECT t.tgname FROM pg_trigger t
         WHERE t.tgrelid = tbl AND t.tgname ~ '^ttl_cell_[0-9]+$'
           AND NOT EXISTS (SELECT 1 FROM ttl.column_policy c
                            WHERE c.relid = tbl AND c.relative_to = 'write' AND t.tgname = 'ttl_cell_' || c.attnum)
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', cp.tgname, tbl::regclass);
    END LOOP;
    FOR cp IN SELECT * FROM ttl.column_policy WHERE relid = tbl AND relative_to = 'write' LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT pg_catalog.tstzrange(pg_catalog.now(), %s, %L)',
                       tbl::regclass, ttl._attname(tbl, cp.track_attnum),
                       ttl._expiry_default_sql(cp.expire_after, true), '[)');
        IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'ttl_cell_' || cp.attnum) THEN
            EXECUTE format('DROP TRIGGER %I ON %s', 'ttl_cell_' || cp.attnum, tbl::regclass);
        END IF;
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OF %I ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION ttl._refresh_cell(%L, %L, %L)', 'ttl_cell_' || cp.attnum,
                       ttl._attname(tbl, cp.attnum), tbl::regclass, ttl._attname(tbl, cp.track_attnum),
                       cp.expire_after::text, 'true');
    END LOOP;

    PERFORM ttl._strict_sync(tbl);
END
$_$;


--
-- Name: _table_search_path(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._table_search_path(tbl oid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT format('pg_catalog, %I, pg_temp', n.nspname)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl
$$;


--
-- Name: _to_bool(text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._to_bool(option text, value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN value::boolean;
EXCEPTION WHEN invalid_text_representation THEN
    RAISE EXCEPTION 'value of % must be a boolean (true/false), got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value';
END
$$;


--
-- Name: _to_int(text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._to_int(option text, value text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN value::integer;
EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
    RAISE EXCEPTION 'value of % must be an integer, got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value';
END
$$;


--
-- Name: _to_interval(text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._to_interval(option text, value text) RETURNS interval
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN value::interval;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
               OR invalid_text_representation OR syntax_error THEN
    RAISE EXCEPTION 'value of % must be an interval, got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'e.g. ''30 days'', ''12 hours'' or ISO 8601 ''P30D'', ''PT1H''.';
END
$$;


--
-- Name: _type_kind(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._type_kind(typ oid) RETURNS text
    LANGUAGE sql STABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE typ
        WHEN 'pg_catalog.date'::regtype THEN 'time'
        WHEN 'pg_catalog.timestamp'::regtype THEN 'time'
        WHEN 'pg_catalog.timestamptz'::regtype THEN 'time'
        WHEN 'pg_catalog.int4'::regtype THEN 'number'
        WHEN 'pg_catalog.int8'::regtype THEN 'number'
        WHEN 'pg_catalog.numeric'::regtype THEN 'number'
    END
$$;


--
-- Name: _validate_column_policy(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._validate_column_policy() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl regclass := NEW.relid::regclass;
    a record;
BEGIN
    PERFORM ttl._check_table(tbl);
    SELECT attname, atttypid, attnotnull, atthasdef INTO a FROM pg_attribute
     WHERE attrelid = NEW.relid AND attnum = NEW.attnum AND NOT attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table %: column with attnum % does not exist', tbl, NEW.attnum USING ERRCODE = 'undefined_column';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = NEW.relid AND i.indisprimary
                AND NEW.attnum = ANY (i.indkey)) THEN
        RAISE EXCEPTION 'column "%" of table % is part of the primary key and cannot expire on its own', a.attname, tbl
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use a table TTL to expire whole rows.';
    END IF;
    IF a.attnotnull AND NOT a.atthasdef THEN
        RAISE EXCEPTION 'column "%" of table % is NOT NULL without a default: an expired value has nothing to become', a.attname, tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the column a DEFAULT (the expired value becomes it) or drop NOT NULL.';
    END IF;
    IF NEW.expire_after IS NULL OR NEW.expire_after <= interval '0' THEN
        RAISE EXCEPTION 'column "%" of table %: value of "ttl_expire_after" must be greater than zero, got %',
            a.attname, tbl, coalesce(NEW.expire_after::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    NEW.atttypid := a.atttypid;
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: _validate_policy(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._validate_policy() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl regclass := NEW.relid::regclass;
    typ oid;
    kind text;
    err text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.relid <> OLD.relid THEN
        RAISE EXCEPTION 'the table of a TTL policy cannot be changed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl._check_table(tbl);

    IF NEW.ttl_attnum IS NOT NULL AND NEW.expiration_expression IS NOT NULL THEN
        RAISE EXCEPTION 'table %: set either "ttl_column" or "ttl_expiration_expression", not both', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Reset one of them first, e.g. SELECT ttl.reset_option(''' || tbl || ''', ''column'').';
    END IF;
    IF NEW.expire_after IS NULL AND NEW.expiration_expression IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_expire_after" and/or "ttl_expiration_expression" must be set', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.expire_after IS NOT NULL AND NEW.expire_after <= interval '0' THEN
        RAISE EXCEPTION 'table %: value of "ttl_expire_after" must be greater than zero, got %', tbl, NEW.expire_after
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF NEW.expiration_expression IS NOT NULL THEN
        -- Per-row TTL (sql/70_row_ttl.sql): the expression is the added expiry
        -- column and expire_after the default TTL of new rows.
        IF NEW.expire_after IS NOT NULL AND NEW.row_expiry_attnum IS NULL THEN
            RAISE EXCEPTION 'table %: "ttl_expire_after" does not apply with "ttl_expiration_expression"', tbl
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The expression gives the expiry time itself; reset one of the two.';
        END IF;
        err := ttl._expression_error(tbl, NEW.expiration_expression);
        IF err IS NOT NULL THEN
            RAISE EXCEPTION 'table %: "ttl_expiration_expression" %', tbl, err
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Give one SQL expression of type timestamptz over the table''s columns, e.g. ''expire_at'' or ''created_at + interval ''''7 days''''''.';
        END IF;
        IF NEW.unit IS NOT NULL THEN
            RAISE EXCEPTION 'table %: "ttl_unit" applies to a numeric "ttl_column" only', tbl
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        NEW.ttl_atttypid := NULL;
    ELSIF NEW.ttl_attnum IS NOT NULL THEN
        SELECT atttypid INTO typ FROM pg_attribute
         WHERE attrelid = NEW.relid AND attnum = NEW.ttl_attnum AND NOT attisdropped;
        IF typ IS NULL THEN
            RAISE EXCEPTION 'table %: "ttl_column" (attnum %) does not exist', tbl, NEW.ttl_attnum
                USING ERRCODE = 'undefined_column';
        END IF;
        kind := ttl._type_kind(typ);
        IF kind IS NULL THEN
            RAISE EXCEPTION 'column "%" of table % has type %, which cannot be a TTL column',
                ttl._attname(NEW.relid, NEW.ttl_attnum), tbl, typ::regtype
                USING ERRCODE = 'datatype_mismatch',
                      HINT = 'Use a date, timestamp or timestamptz column, an integer, bigint or numeric column holding Unix time with "ttl_unit", or "ttl_expiration_expression".';
        END IF;
        IF kind = 'number' AND NEW.unit IS NULL THEN
            RAISE EXCEPTION 'column "%" of table % is %: "ttl_unit" must be set', ttl._attname(NEW.relid, NEW.ttl_attnum),
                tbl, typ::regtype
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Set "ttl_unit" to seconds, milliseconds, microseconds or nanoseconds (the Unix time unit the column holds).';
        END IF;
        IF kind = 'time' AND NEW.unit IS NOT NULL THEN
            RAISE EXCEPTION 'column "%" of table % is %: "ttl_unit" applies to numeric columns only',
                ttl._attname(NEW.relid, NEW.ttl_attnum), tbl, typ::regtype
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        NEW.ttl_atttypid := typ;
    ELSE
        -- Only expire_after: per-row expiry counted from write time. The
        -- a_row_ttl trigger (sql/70_row_ttl.sql) runs first and turns this into
        -- an expression on the added expiry column, so this is not reached.
        RAISE EXCEPTION 'table %: "ttl_expire_after" without "ttl_column" (expiry counted from write time) is not yet supported', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Set "ttl_column" to a timestamp column, or use "ttl_expiration_expression".';
    END IF;

    IF NEW.unit IS NOT NULL AND NEW.unit NOT IN ('seconds', 'milliseconds', 'microseconds', 'nanoseconds') THEN
        RAISE EXCEPTION 'table %: value of "ttl_unit" must be seconds, milliseconds, microseconds or nanoseconds, got "%"',
            tbl, NEW.unit USING ERRCODE = 'invalid_parameter_value';
    END IF;

    err := ttl.cron_error(NEW.job_cron);
    IF err IS NOT NULL THEN
        RAISE EXCEPTION 'table %: invalid cron expression for "ttl_job_cron": %', tbl, err
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly.';
    END IF;

    IF NOT NEW.job_cron_override
       AND ttl.cron_min_interval(NEW.job_cron)
           < coalesce((SELECT value::interval FROM ttl.settings WHERE name = 'min_job_interval'), interval '0') THEN
        RAISE EXCEPTION 'table %: "ttl_job_cron" % runs every %, more often than the minimum interval %', tbl,
            NEW.job_cron, ttl.cron_min_interval(NEW.job_cron),
            (SELECT value FROM ttl.settings WHERE name = 'min_job_interval')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Choose a less frequent schedule, set "ttl_job_cron_override" = true, or lower the min_job_interval setting.';
    END IF;

    IF NEW.select_batch_size < 1 THEN
        RAISE EXCEPTION 'table %: value of "ttl_select_batch_size" must be at least 1, got %', tbl, NEW.select_batch_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.delete_batch_size < 1 THEN
        RAISE EXCEPTION 'table %: value of "ttl_delete_batch_size" must be at least 1, got %', tbl, NEW.delete_batch_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.select_rate_limit < 0 THEN
        RAISE EXCEPTION 'table %: value of "ttl_select_rate_limit" must be at least 1 (or 0 for unlimited), got %',
            tbl, NEW.select_rate_limit USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.delete_rate_limit < 0 THEN
        RAISE EXCEPTION 'table %: value of "ttl_delete_rate_limit" must be at least 1 (or 0 for unlimited), got %',
            tbl, NEW.delete_rate_limit USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.partition_action NOT IN ('drop', 'detach') THEN
        RAISE EXCEPTION 'table %: value of "ttl_partition_action" must be drop or detach, got "%"', tbl, NEW.partition_action
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.partition_action = 'detach' AND NEW.detach_schema IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_partition_action" = detach needs "ttl_detach_schema"', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name the schema that detached partitions move to.';
    END IF;
    IF NEW.detach_schema IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = NEW.detach_schema) THEN
        RAISE EXCEPTION 'table %: schema "%" of "ttl_detach_schema" does not exist', tbl, NEW.detach_schema
            USING ERRCODE = 'invalid_schema_name';
    END IF;

    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: _value_expiry_sql(oid, smallint); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._value_expiry_sql(tbl oid, col smallint) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    cp ttl.column_policy;
    p ttl.policy;
BEGIN
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = col;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF cp.relative_to = 'write' THEN
        RETURN format('pg_catalog.upper(%I)', ttl._attname(tbl, cp.track_attnum));
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF ttl._base_sql(p) IS NULL THEN
        RETURN NULL;  -- the table TTL lost its base (e.g. became an expression): never
    END IF;
    RETURN format('(%s + %L::interval)', ttl._base_sql(p), cp.expire_after::text);
END
$$;


--
-- Name: _visible_sql(ttl.policy); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl._visible_sql(p ttl.policy) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT format('COALESCE(%s > pg_catalog.now(), true)', ttl._row_expiry_sql(p))
$$;


--
-- Name: cron_error(text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.cron_error(expr text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN (ttl._cron_parse(expr)).err;
END
$$;


--
-- Name: cron_min_interval(text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.cron_min_interval(expr text) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p record;
    t int[];
    in_day int;
    day_gap int;
    best int;
BEGIN
    p := ttl._cron_parse(expr);
    IF p.err IS NOT NULL THEN
        RETURN NULL;
    END IF;
    t := ARRAY(SELECT h * 60 + mi FROM unnest(p.hours) AS h, unnest(p.minutes) AS mi ORDER BY 1);
    SELECT min(d) INTO in_day FROM (SELECT x - lag(x) OVER (ORDER BY x) AS d FROM unnest(t) AS x) s;
    IF (p.dom_any AND p.dow_any)
       OR (NOT p.dow_any AND cardinality(p.dows) = 7)   -- every weekday: every day of the months
       OR (NOT p.dom_any AND cardinality(p.doms) = 31 AND NOT p.dow_any) THEN
        day_gap := 1;
    ELSIF p.dom_any THEN
        SELECT min(coalesce(nxt, first_dow + 7) - w) INTO day_gap
        FROM (SELECT w, lead(w) OVER (ORDER BY w) AS nxt, min(w) OVER () AS first_dow
              FROM unnest(p.dows) AS w) s;
    ELSE
        SELECT min(d - prev) INTO day_gap
        FROM (SELECT d, lag(d) OVER (ORDER BY d) AS prev
              FROM (SELECT date '2000-01-01' + n AS d FROM generate_series(0, date '2032-01-01' - date '2000-01-01' - 1) AS n) days
              WHERE extract(month FROM d)::int = ANY (p.months)
                AND (extract(day FROM d)::int = ANY (p.doms)
                     OR (NOT p.dow_any AND extract(dow FROM d)::int = ANY (p.dows)))) s;
    END IF;
    best := day_gap * 1440 - (t[cardinality(t)] - t[1]);
    IF in_day < best THEN
        best := in_day;
    END IF;
    RETURN make_interval(days => best / 1440, mins => best % 1440);
END
$$;


--
-- Name: describe(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.describe(tbl regclass) RETURNS TABLE(option text, value text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = tbl) THEN
        RAISE EXCEPTION 'table % has no TTL', tbl USING ERRCODE = 'undefined_object';
    END IF;
    IF FOUND THEN
        RETURN QUERY VALUES
            ('table', tbl::text),
            ('ttl_column', ttl._attname(p.relid, p.ttl_attnum)::text),
            ('ttl_expiration_expression', p.expiration_expression),
            ('ttl_expire_after', p.expire_after::text),
            ('ttl_unit', p.unit),
            ('ttl_job_cron', p.job_cron),
            ('ttl_job_cron_override', p.job_cron_override::text),
            ('ttl_select_batch_size', p.select_batch_size::text),
            ('ttl_delete_batch_size', p.delete_batch_size::text),
            ('ttl_select_rate_limit', p.select_rate_limit::text),
            ('ttl_delete_rate_limit', p.delete_rate_limit::text),
            ('ttl_pause', p.paused::text),
            ('ttl_partition_action', p.partition_action),
            ('ttl_detach_schema', p.detach_schema::text),
            ('ttl_strict', p.strict_visibility::text),
            ('ttl_partition_ignore_value_ttl', p.partition_ignore_value_ttl::text),
            ('ttl_value_ttl_overrides_table_ttl', p.value_ttl_overrides_table_ttl::text),
            ('row_expiry_column', ttl._attname(p.relid, p.row_expiry_attnum)::text),
            ('created_at', p.created_at::text),
            ('updated_at', p.updated_at::text);
    END IF;
    RETURN QUERY
        SELECT format('column %I: ttl_expire_after', ttl._attname(c.relid, c.attnum)), c.expire_after::text
          FROM ttl.column_policy c WHERE c.relid = tbl ORDER BY c.attnum;
    RETURN QUERY
        SELECT format('column %I: relative_to', ttl._attname(c.relid, c.attnum)), c.relative_to
          FROM ttl.column_policy c WHERE c.relid = tbl ORDER BY c.attnum;
END
$$;


--
-- Name: disable(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.disable(tbl regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n integer;
    m integer;
BEGIN
    PERFORM ttl._check_table(tbl);
    DELETE FROM ttl.policy WHERE relid = tbl;
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM ttl.column_policy WHERE relid = tbl;
    GET DIAGNOSTICS m = ROW_COUNT;
    IF n + m = 0 THEN
        RAISE EXCEPTION 'table % has no TTL', tbl USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM pg_notify('pg_ttl', tbl::text);
END
$$;


--
-- Name: disable_column(regclass, name); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.disable_column(tbl regclass, column_name name) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM ttl._check_table(tbl);
    DELETE FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl, column_name, 'column');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table % has no TTL', column_name, tbl USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM pg_notify('pg_ttl', tbl::text);
END
$$;


--
-- Name: enable(regclass, interval, name, text, text, text, integer, integer, integer, integer, boolean, text, name, boolean); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.enable(tbl regclass, expire_after interval DEFAULT NULL::interval, column_name name DEFAULT NULL::name, expiration_expression text DEFAULT NULL::text, unit text DEFAULT NULL::text, job_cron text DEFAULT NULL::text, select_batch_size integer DEFAULT NULL::integer, delete_batch_size integer DEFAULT NULL::integer, select_rate_limit integer DEFAULT NULL::integer, delete_rate_limit integer DEFAULT NULL::integer, pause boolean DEFAULT false, partition_action text DEFAULT NULL::text, detach_schema name DEFAULT NULL::name, job_cron_override boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF EXISTS (SELECT 1 FROM ttl.policy WHERE relid = tbl) THEN
        RAISE EXCEPTION 'table % already has a TTL', tbl USING ERRCODE = 'duplicate_object',
            HINT = format('Change it with ttl.set_option(%L, ...), or remove it with ttl.disable(%L).', tbl::text, tbl::text);
    END IF;
    p := ttl._default_policy(tbl);
    p.expire_after := expire_after;
    IF column_name IS NOT NULL THEN
        p.ttl_attnum := ttl._attnum(tbl, column_name, 'column');
    END IF;
    p.expiration_expression := nullif(btrim(expiration_expression), '');
    p.unit := lower(btrim(unit));
    p.job_cron := coalesce(btrim(job_cron), p.job_cron);
    p.job_cron_override := coalesce(job_cron_override, false);
    p.select_batch_size := coalesce(select_batch_size, p.select_batch_size);
    p.delete_batch_size := coalesce(delete_batch_size, p.delete_batch_size);
    p.select_rate_limit := coalesce(select_rate_limit, p.select_rate_limit);
    p.delete_rate_limit := coalesce(delete_rate_limit, p.delete_rate_limit);
    p.paused := coalesce(pause, false);
    p.partition_action := coalesce(lower(partition_action), p.partition_action);
    p.detach_schema := detach_schema;
    PERFORM ttl._save_policy(p, true);
END
$$;


--
-- Name: enable_column(regclass, name, interval); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.enable_column(tbl regclass, column_name name, expire_after interval) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n smallint;
BEGIN
    PERFORM ttl._check_table(tbl);
    n := ttl._attnum(tbl, column_name, 'column');
    INSERT INTO ttl.column_policy (relid, attnum, atttypid, expire_after)
    VALUES (tbl, n, 0, expire_after)
    ON CONFLICT (relid, attnum) DO UPDATE SET expire_after = EXCLUDED.expire_after;
    PERFORM pg_notify('pg_ttl', tbl::text);
END
$$;


--
-- Name: enable_column(regclass, name, interval, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.enable_column(tbl regclass, column_name name, expire_after interval, relative_to text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n smallint;
BEGIN
    PERFORM ttl._check_table(tbl);
    n := ttl._attnum(tbl, column_name, 'column');
    INSERT INTO ttl.column_policy (relid, attnum, atttypid, expire_after, relative_to)
    VALUES (tbl, n, 0, expire_after, lower(btrim(relative_to)))
    ON CONFLICT (relid, attnum) DO UPDATE SET expire_after = EXCLUDED.expire_after,
                                              relative_to = EXCLUDED.relative_to;
    PERFORM pg_notify('pg_ttl', tbl::text);
END
$$;


--
-- Name: expires_at(anyelement); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.expires_at(r anyelement) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = ttl._row_table(pg_typeof(r));
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN ttl._eval_on_row(r, ttl._row_expiry_sql(p), p.relid);
END
$$;


--
-- Name: expires_at(anyelement, name); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.expires_at(r anyelement, column_name name) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl oid := ttl._row_table(pg_typeof(r));
BEGIN
    RETURN ttl._eval_on_row(r, ttl._value_expiry_sql(tbl, ttl._attnum(tbl::regclass, column_name, 'column')), tbl);
END
$$;


--
-- Name: null_expired_values(regclass, regclass, name, integer, timestamp with time zone); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.null_expired_values(tbl regclass, part regclass, column_name name, batch integer, cutoff timestamp with time zone DEFAULT now()) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    cp ttl.column_policy;
    expiry text;
    target text;
    pending text;
    stmt text;
    n bigint;
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
        pending := format('%s <= %L::timestamptz', expiry, cutoff);
    ELSIF a.attnotnull THEN
        pending := format('%s <= %L::timestamptz AND %I IS DISTINCT FROM %s', expiry, cutoff, column_name,
                          (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute x
                               ON x.attrelid = d.adrelid AND x.attnum = d.adnum
                            WHERE d.adrelid = part AND x.attname = column_name));
    ELSE
        pending := format('%s <= %L::timestamptz AND %I IS NOT NULL', expiry, cutoff, column_name);
    END IF;
    stmt := format('WITH due AS (SELECT ctid FROM ONLY %1$s WHERE %2$s LIMIT %3$s FOR UPDATE SKIP LOCKED) '
                   'UPDATE ONLY %1$s AS t SET %4$I = %5$s FROM due WHERE t.ctid = due.ctid AND %2$s',
                   part, pending, batch, column_name, target);
    -- The nulling UPDATE must not refresh write times or row expiry.
    PERFORM set_config('pg_ttl.expiring', 'on', true);
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE stmt;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    PERFORM set_config('pg_ttl.expiring', 'off', true);
    RETURN n;
END
$_$;


--
-- Name: option_names(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.option_names() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ARRAY['expire_after', 'column', 'expiration_expression', 'unit', 'job_cron',
                 'job_cron_override', 'select_batch_size', 'delete_batch_size',
                 'select_rate_limit', 'delete_rate_limit', 'pause', 'partition_action',
                 'detach_schema', 'strict', 'partition_ignore_value_ttl', 'value_ttl_overrides_table_ttl']
$$;


--
-- Name: pause(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.pause(tbl regclass) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl.set_option(tbl, 'pause', 'true')
$$;


--
-- Name: prune_history(); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.prune_history() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
$$;


--
-- Name: reset_option(regclass, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.reset_option(tbl regclass, option text) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl.reset_options(tbl, VARIADIC ARRAY[option])
$$;


--
-- Name: reset_options(regclass, text[]); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.reset_options(tbl regclass, VARIADIC options text[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
    d ttl.policy;
    opt text;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF 'ttl' = ANY (SELECT lower(btrim(o)) FROM unnest(options) AS o) THEN
        PERFORM ttl.disable(tbl);
        RETURN;
    END IF;
    p := ttl._get_policy(tbl);
    d := ttl._default_policy(tbl);
    FOREACH opt IN ARRAY options LOOP
        CASE ttl._option_key(opt)
            WHEN 'expire_after' THEN p.expire_after := NULL;
            WHEN 'column' THEN p.ttl_attnum := NULL;
            WHEN 'expiration_expression' THEN p.expiration_expression := NULL;
            WHEN 'unit' THEN p.unit := NULL;
            WHEN 'job_cron' THEN p.job_cron := d.job_cron;
            WHEN 'job_cron_override' THEN p.job_cron_override := d.job_cron_override;
            WHEN 'select_batch_size' THEN p.select_batch_size := d.select_batch_size;
            WHEN 'delete_batch_size' THEN p.delete_batch_size := d.delete_batch_size;
            WHEN 'select_rate_limit' THEN p.select_rate_limit := d.select_rate_limit;
            WHEN 'delete_rate_limit' THEN p.delete_rate_limit := d.delete_rate_limit;
            WHEN 'pause' THEN p.paused := d.paused;
            WHEN 'partition_action' THEN p.partition_action := d.partition_action;
            WHEN 'detach_schema' THEN p.detach_schema := NULL;
            WHEN 'strict' THEN p.strict_visibility := false;
            WHEN 'partition_ignore_value_ttl' THEN p.partition_ignore_value_ttl := false;
            WHEN 'value_ttl_overrides_table_ttl' THEN p.value_ttl_overrides_table_ttl := false;
            ELSE
                RAISE EXCEPTION 'unknown TTL option %', ttl._option_label(opt)
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'Accepted options: ttl, ttl_' || array_to_string(ttl.option_names(), ', ttl_') || '.';
        END CASE;
    END LOOP;
    PERFORM ttl._save_policy(p, false);
END
$$;


--
-- Name: resume(regclass); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.resume(tbl regclass) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl.set_option(tbl, 'pause', 'false')
$$;


--
-- Name: row_expires_at(interval, boolean); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.row_expires_at(default_ttl interval, override_wins boolean DEFAULT false) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    o interval := ttl._row_ttl_override();
BEGIN
    IF o IS NULL THEN
        RETURN now() + default_ttl;
    ELSIF o = interval '0' THEN
        RETURN NULL;
    ELSIF override_wins THEN
        RETURN now() + o;
    END IF;
    RETURN now() + greatest(o, default_ttl);
END
$$;


--
-- Name: run(regclass, timestamp with time zone); Type: PROCEDURE; Schema: ttl; Owner: -
--

CREATE PROCEDURE ttl.run(IN tbl regclass DEFAULT NULL::regclass, IN cutoff timestamp with time zone DEFAULT NULL::timestamp with time zone)
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: set_option(regclass, text, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.set_option(tbl regclass, option text, value text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM ttl._check_table(tbl);
    PERFORM ttl._get_policy(tbl);
    PERFORM ttl.set_options(tbl, jsonb_build_object(option, value));
END
$$;


--
-- Name: set_options(regclass, jsonb); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.set_options(tbl regclass, options jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
    is_new boolean;
    kv record;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF jsonb_typeof(options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object of option names and values'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    is_new := NOT FOUND;
    IF is_new THEN
        p := ttl._default_policy(tbl);
    END IF;
    FOR kv IN SELECT key, value FROM jsonb_each(options) LOOP
        p := ttl._apply_option(p, kv.key, CASE WHEN jsonb_typeof(kv.value) = 'null' THEN NULL
                                               ELSE kv.value #>> '{}' END);
    END LOOP;
    IF is_new AND p.expire_after IS NULL AND p.expiration_expression IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL: "ttl_expire_after" and/or "ttl_expiration_expression" must be set', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl._save_policy(p, is_new);
END
$$;


--
-- Name: ttl(anyelement); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.ttl(r anyelement) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl._seconds_left(ttl.expires_at(r))
$$;


--
-- Name: ttl(anyelement, name); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.ttl(r anyelement, column_name name) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl._seconds_left(ttl.expires_at(r, column_name))
$$;


--
-- Name: using_ttl(interval); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.using_ttl(ttl interval) RETURNS interval
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT ttl.using_ttl(ttl, true)
$$;


--
-- Name: using_ttl(interval, boolean); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.using_ttl(ttl interval, local boolean) RETURNS interval
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF ttl < interval '0' THEN
        RAISE EXCEPTION 'TTL must not be negative, got %', ttl USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Give an interval > 0, or 0 for "never expires".';
    END IF;
    IF local AND transaction_timestamp() = statement_timestamp() THEN
        -- Most likely autocommit: this statement is its own transaction.
        RAISE NOTICE 'ttl.using_ttl: the TTL override lasts until the end of this transaction'
            USING HINT = 'Call it inside BEGIN ... COMMIT with the writes, or use ttl.using_ttl(ttl, false) for the session.';
    END IF;
    PERFORM set_config('pg_ttl.row_ttl', coalesce(ttl::text, ''), local);
    RETURN ttl;
END
$$;


--
-- Name: worker_begin_run(oid, timestamp with time zone, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.worker_begin_run(p_relid oid, p_due timestamp with time zone, p_worker text, OUT verdict text, OUT round_started timestamp with time zone) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
$$;


--
-- Name: worker_end_run(oid, timestamp with time zone, text); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.worker_end_run(p_relid oid, p_due timestamp with time zone, p_status text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    -- 'interrupted' (the worker is stopping mid-run) leaves the round open, to be resumed.
    UPDATE ttl.worker_schedule
       SET finished_at = CASE WHEN p_status = 'interrupted' THEN NULL ELSE pg_catalog.clock_timestamp() END,
           last_status = p_status
     WHERE relid = p_relid AND due_at = p_due;
    PERFORM pg_catalog.pg_advisory_unlock_shared(ttl.worker_lock_key(p_relid));
END
$$;


--
-- Name: worker_heartbeat(text, text, integer, text, text, integer); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.worker_heartbeat(p_name text, p_host text, p_pid integer, p_version text, p_state text, p_tables integer) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    INSERT INTO ttl.worker AS w (name, host, pid, version, state, tables)
    VALUES (p_name, p_host, p_pid, p_version, p_state, p_tables)
    ON CONFLICT (name) DO UPDATE
       SET heartbeat_at = pg_catalog.now(), state = excluded.state, tables = excluded.tables,
           host = excluded.host, pid = excluded.pid, version = excluded.version,
           started_at = CASE WHEN w.pid <> excluded.pid THEN pg_catalog.now() ELSE w.started_at END
$$;


--
-- Name: worker_lock_key(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.worker_lock_key(p_relid oid) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT (1953786999::bigint << 32) | p_relid::bigint
$$;


--
-- Name: worker_running(oid); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.worker_running(p_relid oid) RETURNS integer
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT count(*)::integer
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND l.classid = 1953786999::oid AND l.objid = p_relid
       AND l.pid <> pg_catalog.pg_backend_pid()
$$;


--
-- Name: write_time(anyelement); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.write_time(r anyelement) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = ttl._row_table(pg_typeof(r));
    IF NOT FOUND OR ttl._base_sql(p) IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN ttl._eval_on_row(r, ttl._base_sql(p), p.relid);
END
$$;


--
-- Name: write_time(anyelement, name); Type: FUNCTION; Schema: ttl; Owner: -
--

CREATE FUNCTION ttl.write_time(r anyelement, column_name name) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tbl oid := ttl._row_table(pg_typeof(r));
    cp ttl.column_policy;
BEGIN
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl::regclass, column_name, 'column');
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF cp.relative_to = 'write' THEN
        RETURN ttl._eval_on_row(r, format('pg_catalog.lower(%I)', ttl._attname(tbl, cp.track_attnum)), tbl);
    END IF;
    RETURN ttl.write_time(r);
END
$$;


--
-- Name: alembic_version; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.alembic_version (
    version_num character varying(32) NOT NULL
);


--
-- Name: column_policy; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.column_policy (
    relid oid NOT NULL,
    attnum smallint NOT NULL,
    atttypid oid NOT NULL,
    expire_after interval NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    relative_to text,
    track_attnum smallint,
    CONSTRAINT column_policy_relative_to CHECK ((relative_to = ANY (ARRAY['row'::text, 'write'::text])))
);


--
-- Name: column_policies; Type: VIEW; Schema: ttl; Owner: -
--

CREATE VIEW ttl.column_policies AS
 SELECT cp.relid,
    ((cp.relid)::regclass)::text AS table_name,
    a.attname AS column_name,
    cp.expire_after,
    cp.created_at,
    cp.updated_at,
    cp.relative_to,
    ( SELECT x.attname
           FROM pg_attribute x
          WHERE ((x.attrelid = cp.relid) AND (x.attnum = cp.track_attnum) AND (NOT x.attisdropped))) AS tracking_column
   FROM (ttl.column_policy cp
     JOIN pg_attribute a ON (((a.attrelid = cp.relid) AND (a.attnum = cp.attnum))));


--
-- Name: run; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.run (
    run_id bigint NOT NULL,
    relid oid NOT NULL,
    table_name text NOT NULL,
    worker text,
    cutoff timestamp with time zone NOT NULL,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    finished_at timestamp with time zone,
    status text DEFAULT 'running'::text NOT NULL,
    rows_selected bigint DEFAULT 0 NOT NULL,
    rows_deleted bigint DEFAULT 0 NOT NULL,
    partitions_dropped integer DEFAULT 0 NOT NULL,
    partitions_detached integer DEFAULT 0 NOT NULL,
    error text,
    CONSTRAINT run_status CHECK ((status = ANY (ARRAY['running'::text, 'ok'::text, 'partial'::text, 'failed'::text, 'paused'::text, 'busy'::text, 'interrupted'::text])))
);


--
-- Name: run_unit; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.run_unit (
    run_id bigint NOT NULL,
    unit_relid oid NOT NULL,
    unit_name text NOT NULL,
    action text NOT NULL,
    strategy text,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    finished_at timestamp with time zone,
    status text DEFAULT 'running'::text NOT NULL,
    rows_selected bigint DEFAULT 0 NOT NULL,
    rows_deleted bigint DEFAULT 0 NOT NULL,
    error text,
    checkpoint jsonb,
    values_nulled bigint DEFAULT 0 NOT NULL,
    CONSTRAINT run_unit_action CHECK ((action = ANY (ARRAY['delete'::text, 'drop'::text, 'detach'::text, 'skip'::text]))),
    CONSTRAINT run_unit_status CHECK ((status = ANY (ARRAY['running'::text, 'ok'::text, 'partial'::text, 'timeout'::text, 'failed'::text, 'skipped'::text, 'interrupted'::text])))
)
WITH (fillfactor='50');


--
-- Name: last_run; Type: VIEW; Schema: ttl; Owner: -
--

CREATE VIEW ttl.last_run AS
 SELECT r.relid,
    r.table_name,
    r.run_id,
    r.worker,
    r.cutoff,
    r.started_at,
    r.finished_at,
    (r.finished_at - r.started_at) AS duration,
    r.status,
    COALESCE(u.rows_selected, (0)::bigint) AS rows_selected,
    COALESCE(u.rows_deleted, (0)::bigint) AS rows_deleted,
    COALESCE(u.partitions_dropped, (0)::bigint) AS partitions_dropped,
    COALESCE(u.partitions_detached, (0)::bigint) AS partitions_detached,
    COALESCE(u.units, (0)::bigint) AS units,
    COALESCE(u.units_not_ok, (0)::bigint) AS units_not_ok,
    r.error
   FROM (( SELECT DISTINCT ON (run.relid) run.run_id,
            run.relid,
            run.table_name,
            run.worker,
            run.cutoff,
            run.started_at,
            run.finished_at,
            run.status,
            run.rows_selected,
            run.rows_deleted,
            run.partitions_dropped,
            run.partitions_detached,
            run.error
           FROM ttl.run
          ORDER BY run.relid, run.run_id DESC) r
     LEFT JOIN LATERAL ( SELECT (sum(x.rows_selected))::bigint AS rows_selected,
            (sum(x.rows_deleted))::bigint AS rows_deleted,
            count(*) FILTER (WHERE ((x.action = 'drop'::text) AND (x.status = 'ok'::text))) AS partitions_dropped,
            count(*) FILTER (WHERE ((x.action = 'detach'::text) AND (x.status = 'ok'::text))) AS partitions_detached,
            count(*) AS units,
            count(*) FILTER (WHERE (x.status <> 'ok'::text)) AS units_not_ok
           FROM ttl.run_unit x
          WHERE (x.run_id = r.run_id)) u ON (true));


--
-- Name: policies; Type: VIEW; Schema: ttl; Owner: -
--

CREATE VIEW ttl.policies AS
 SELECT p.relid,
    ((p.relid)::regclass)::text AS table_name,
    n.nspname AS schema_name,
    c.relname,
    a.attname AS ttl_column,
    p.expiration_expression,
    p.expire_after,
    p.unit,
    p.job_cron,
    p.job_cron_override,
    p.select_batch_size,
    p.delete_batch_size,
    p.select_rate_limit,
    p.delete_rate_limit,
    p.paused,
    p.partition_action,
    p.detach_schema,
    ( SELECT count(*) AS count
           FROM ttl.column_policy cp
          WHERE (cp.relid = p.relid)) AS column_policies,
    p.created_at,
    p.updated_at,
    p.strict_visibility AS strict,
    p.partition_ignore_value_ttl,
    p.value_ttl_overrides_table_ttl,
    ( SELECT x.attname
           FROM pg_attribute x
          WHERE ((x.attrelid = p.relid) AND (x.attnum = p.row_expiry_attnum) AND (NOT x.attisdropped))) AS row_expiry_column,
    ( SELECT x.attname
           FROM pg_attribute x
          WHERE ((x.attrelid = p.relid) AND (x.attnum = p.row_write_attnum) AND (NOT x.attisdropped))) AS row_write_column
   FROM (((ttl.policy p
     JOIN pg_class c ON ((c.oid = p.relid)))
     JOIN pg_namespace n ON ((n.oid = c.relnamespace)))
     LEFT JOIN pg_attribute a ON (((a.attrelid = p.relid) AND (a.attnum = p.ttl_attnum) AND (NOT a.attisdropped))));


--
-- Name: run_run_id_seq; Type: SEQUENCE; Schema: ttl; Owner: -
--

ALTER TABLE ttl.run ALTER COLUMN run_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME ttl.run_run_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: settings; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.settings (
    name text NOT NULL,
    value text NOT NULL,
    description text NOT NULL,
    CONSTRAINT settings_row_strategy CHECK (((name <> 'row_strategy'::text) OR (value = ANY (ARRAY['auto'::text, 'index'::text, 'ctid'::text]))))
);


--
-- Name: worker; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.worker (
    name text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    state text DEFAULT 'running'::text NOT NULL,
    tables integer DEFAULT 0 NOT NULL
);


--
-- Name: worker_schedule; Type: TABLE; Schema: ttl; Owner: -
--

CREATE TABLE ttl.worker_schedule (
    relid oid NOT NULL,
    due_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    started_by text,
    last_status text
);


--
-- Name: worker_tables; Type: VIEW; Schema: ttl; Owner: -
--

CREATE VIEW ttl.worker_tables AS
 SELECT p.relid,
    p.table_name,
    p.schema_name,
    p.relname,
    p.job_cron,
    p.job_cron_override,
    p.paused,
    p.created_at,
    'table'::text AS kind
   FROM ttl.policies p
UNION ALL
 SELECT cp.relid,
    ((cp.relid)::regclass)::text AS table_name,
    n.nspname AS schema_name,
    c.relname,
    COALESCE(( SELECT s.value
           FROM ttl.settings s
          WHERE (s.name = 'default_job_cron'::text)), '@hourly'::text) AS job_cron,
    false AS job_cron_override,
    false AS paused,
    min(cp.created_at) AS created_at,
    'columns'::text AS kind
   FROM ((ttl.column_policy cp
     JOIN pg_class c ON ((c.oid = cp.relid)))
     JOIN pg_namespace n ON ((n.oid = c.relnamespace)))
  WHERE (NOT (EXISTS ( SELECT 1
           FROM ttl.policy p
          WHERE (p.relid = cp.relid))))
  GROUP BY cp.relid, n.nspname, c.relname;


--
-- Data for Name: alembic_version; Type: TABLE DATA; Schema: ttl; Owner: -
--

INSERT INTO ttl.alembic_version VALUES ('0004');


--
-- Data for Name: column_policy; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Data for Name: policy; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Data for Name: run; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Data for Name: run_unit; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Data for Name: settings; Type: TABLE DATA; Schema: ttl; Owner: -
--

INSERT INTO ttl.settings VALUES ('default_job_cron', '@hourly', 'schedule of a policy that sets no ttl_job_cron');
INSERT INTO ttl.settings VALUES ('min_job_interval', '15 minutes', 'policies may not be scheduled more often than this (ttl_job_cron_override lifts it)');
INSERT INTO ttl.settings VALUES ('history_retention', '30 days', 'run history older than this is removed');
INSERT INTO ttl.settings VALUES ('lock_timeout', '1s', 'lock_timeout of every engine transaction');
INSERT INTO ttl.settings VALUES ('statement_timeout', '30s', 'statement_timeout of every engine transaction');
INSERT INTO ttl.settings VALUES ('row_lock_timeout', '50ms', 'lock_timeout of the fast delete path; a range that hits it is redone with SKIP LOCKED');
INSERT INTO ttl.settings VALUES ('row_strategy', 'auto', 'how rows are found: auto (key ranges over a btree on the TTL column when few rows are expired, else ctid block ranges), index, or ctid');


--
-- Data for Name: worker; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Data for Name: worker_schedule; Type: TABLE DATA; Schema: ttl; Owner: -
--



--
-- Name: run_run_id_seq; Type: SEQUENCE SET; Schema: ttl; Owner: -
--

SELECT pg_catalog.setval('ttl.run_run_id_seq', 1, false);


--
-- Name: alembic_version alembic_version_pkc; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);


--
-- Name: column_policy column_policy_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.column_policy
    ADD CONSTRAINT column_policy_pkey PRIMARY KEY (relid, attnum);


--
-- Name: policy policy_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.policy
    ADD CONSTRAINT policy_pkey PRIMARY KEY (relid);


--
-- Name: run run_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.run
    ADD CONSTRAINT run_pkey PRIMARY KEY (run_id);


--
-- Name: run_unit run_unit_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.run_unit
    ADD CONSTRAINT run_unit_pkey PRIMARY KEY (run_id, unit_relid);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (name);


--
-- Name: worker worker_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.worker
    ADD CONSTRAINT worker_pkey PRIMARY KEY (name);


--
-- Name: worker_schedule worker_schedule_pkey; Type: CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.worker_schedule
    ADD CONSTRAINT worker_schedule_pkey PRIMARY KEY (relid);


--
-- Name: run_relid_started; Type: INDEX; Schema: ttl; Owner: -
--

CREATE INDEX run_relid_started ON ttl.run USING btree (relid, started_at DESC);


--
-- Name: run_started; Type: INDEX; Schema: ttl; Owner: -
--

CREATE INDEX run_started ON ttl.run USING btree (started_at);


--
-- Name: run_unit_relid; Type: INDEX; Schema: ttl; Owner: -
--

CREATE INDEX run_unit_relid ON ttl.run_unit USING btree (unit_relid);


--
-- Name: column_policy a_row_ttl; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER a_row_ttl BEFORE INSERT OR UPDATE ON ttl.column_policy FOR EACH ROW EXECUTE FUNCTION ttl._column_policy_mode();


--
-- Name: policy a_row_ttl; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER a_row_ttl BEFORE INSERT OR UPDATE ON ttl.policy FOR EACH ROW EXECUTE FUNCTION ttl._policy_row_mode();


--
-- Name: column_policy validate; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER validate BEFORE INSERT OR UPDATE ON ttl.column_policy FOR EACH ROW EXECUTE FUNCTION ttl._validate_column_policy();


--
-- Name: policy validate; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER validate BEFORE INSERT OR UPDATE ON ttl.policy FOR EACH ROW EXECUTE FUNCTION ttl._validate_policy();


--
-- Name: column_policy z_row_ttl_sync; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER z_row_ttl_sync AFTER INSERT OR DELETE OR UPDATE ON ttl.column_policy FOR EACH ROW EXECUTE FUNCTION ttl._column_policy_after();


--
-- Name: policy z_row_ttl_sync; Type: TRIGGER; Schema: ttl; Owner: -
--

CREATE TRIGGER z_row_ttl_sync AFTER INSERT OR DELETE OR UPDATE ON ttl.policy FOR EACH ROW EXECUTE FUNCTION ttl._policy_after();


--
-- Name: run_unit run_unit_run_id_fkey; Type: FK CONSTRAINT; Schema: ttl; Owner: -
--

ALTER TABLE ONLY ttl.run_unit
    ADD CONSTRAINT run_unit_run_id_fkey FOREIGN KEY (run_id) REFERENCES ttl.run(run_id) ON DELETE CASCADE;


--
-- Name: column_policy; Type: ROW SECURITY; Schema: ttl; Owner: -
--

ALTER TABLE ttl.column_policy ENABLE ROW LEVEL SECURITY;

--
-- Name: column_policy owner_writes; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY owner_writes ON ttl.column_policy USING (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = column_policy.relid)), 'MEMBER'::text)) WITH CHECK (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = column_policy.relid)), 'MEMBER'::text));


--
-- Name: policy owner_writes; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY owner_writes ON ttl.policy USING (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = policy.relid)), 'MEMBER'::text)) WITH CHECK (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = policy.relid)), 'MEMBER'::text));


--
-- Name: worker_schedule owner_writes; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY owner_writes ON ttl.worker_schedule USING (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = worker_schedule.relid)), 'MEMBER'::text)) WITH CHECK (pg_has_role(CURRENT_USER, ( SELECT c.relowner
   FROM pg_class c
  WHERE (c.oid = worker_schedule.relid)), 'MEMBER'::text));


--
-- Name: policy; Type: ROW SECURITY; Schema: ttl; Owner: -
--

ALTER TABLE ttl.policy ENABLE ROW LEVEL SECURITY;

--
-- Name: column_policy read_all; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY read_all ON ttl.column_policy FOR SELECT USING (true);


--
-- Name: policy read_all; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY read_all ON ttl.policy FOR SELECT USING (true);


--
-- Name: worker_schedule read_all; Type: POLICY; Schema: ttl; Owner: -
--

CREATE POLICY read_all ON ttl.worker_schedule FOR SELECT USING (true);


--
-- Name: worker_schedule; Type: ROW SECURITY; Schema: ttl; Owner: -
--

ALTER TABLE ttl.worker_schedule ENABLE ROW LEVEL SECURITY;

--
-- Name: SCHEMA ttl; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA ttl TO PUBLIC;


--
-- Name: TABLE policy; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.policy TO PUBLIC;


--
-- Name: TABLE column_policy; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.column_policy TO PUBLIC;


--
-- Name: TABLE column_policies; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT ON TABLE ttl.column_policies TO PUBLIC;


--
-- Name: TABLE run; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.run TO PUBLIC;


--
-- Name: TABLE run_unit; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.run_unit TO PUBLIC;


--
-- Name: TABLE last_run; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT ON TABLE ttl.last_run TO PUBLIC;


--
-- Name: TABLE policies; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT ON TABLE ttl.policies TO PUBLIC;


--
-- Name: TABLE settings; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT ON TABLE ttl.settings TO PUBLIC;


--
-- Name: TABLE worker; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.worker TO PUBLIC;


--
-- Name: TABLE worker_schedule; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE ttl.worker_schedule TO PUBLIC;


--
-- Name: TABLE worker_tables; Type: ACL; Schema: ttl; Owner: -
--

GRANT SELECT ON TABLE ttl.worker_tables TO PUBLIC;


--
-- PostgreSQL database dump complete
--



-- Event triggers
CREATE EVENT TRIGGER "pg_ttl_ddl_end" ON "ddl_command_end" WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION ttl._on_ddl_end();
CREATE EVENT TRIGGER "pg_ttl_sql_drop" ON "sql_drop" EXECUTE FUNCTION ttl._on_sql_drop();
