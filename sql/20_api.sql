-- The SQL API: plain function calls any table owner can make from psql.
-- Functions are SECURITY INVOKER: row security on ttl.policy and the
-- validation trigger apply to every caller, whatever the entry point.

-- A policy row with every option at its default.
CREATE OR REPLACE FUNCTION ttl._default_policy(tbl regclass) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._to_int(option text, value text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN value::integer;
EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
    RAISE EXCEPTION 'value of % must be an integer, got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value';
END
$fn$;

CREATE OR REPLACE FUNCTION ttl._to_bool(option text, value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN value::boolean;
EXCEPTION WHEN invalid_text_representation THEN
    RAISE EXCEPTION 'value of % must be a boolean (true/false), got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value';
END
$fn$;

-- PostgreSQL's interval input already reads ISO 8601 ('PT1H', 'P30D').
CREATE OR REPLACE FUNCTION ttl._to_interval(option text, value text) RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN value::interval;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
               OR invalid_text_representation OR syntax_error THEN
    RAISE EXCEPTION 'value of % must be an interval, got "%"', ttl._option_label(option), value
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'e.g. ''30 days'', ''12 hours'' or ISO 8601 ''P30D'', ''PT1H''.';
END
$fn$;

-- Apply one named option (text value, as DDL and set_option give it) to a policy row.
CREATE OR REPLACE FUNCTION ttl._apply_option(p ttl.policy, option text, value text) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._get_policy(tbl regclass) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._save_policy(p ttl.policy, is_new boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl.enable(
    tbl regclass,
    expire_after interval DEFAULT NULL,
    column_name name DEFAULT NULL,
    expiration_expression text DEFAULT NULL,
    unit text DEFAULT NULL,
    job_cron text DEFAULT NULL,
    select_batch_size integer DEFAULT NULL,
    delete_batch_size integer DEFAULT NULL,
    select_rate_limit integer DEFAULT NULL,
    delete_rate_limit integer DEFAULT NULL,
    pause boolean DEFAULT false,
    partition_action text DEFAULT NULL,
    detach_schema name DEFAULT NULL,
    job_cron_override boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- Set several options at once (what TTL DDL turns into). On a table without
-- TTL this enables it, so "ttl_expire_after" and/or "ttl_expiration_expression"
-- must be among them.
CREATE OR REPLACE FUNCTION ttl.set_options(tbl regclass, options jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl.set_option(tbl regclass, option text, value text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM ttl._check_table(tbl);
    PERFORM ttl._get_policy(tbl);
    PERFORM ttl.set_options(tbl, jsonb_build_object(option, value));
END
$fn$;

-- Restore options to their defaults. "ttl" alone removes the TTL (RESET (ttl)).
CREATE OR REPLACE FUNCTION ttl.reset_options(tbl regclass, VARIADIC options text[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl.reset_option(tbl regclass, option text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.reset_options(tbl, VARIADIC ARRAY[option])
$fn$;

-- Removes the table's TTL: its policy and its column policies.
CREATE OR REPLACE FUNCTION ttl.disable(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl.pause(tbl regclass) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.set_option(tbl, 'pause', 'true')
$fn$;

CREATE OR REPLACE FUNCTION ttl.resume(tbl regclass) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.set_option(tbl, 'pause', 'false')
$fn$;

-- Column TTL: the column's value becomes NULL (or its default) once expired.
CREATE OR REPLACE FUNCTION ttl.enable_column(tbl regclass, column_name name, expire_after interval) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl.disable_column(tbl regclass, column_name name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM ttl._check_table(tbl);
    DELETE FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl, column_name, 'column');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table % has no TTL', column_name, tbl USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM pg_notify('pg_ttl', tbl::text);
END
$fn$;

-- Every option of a table's TTL, as (option, value) rows.
CREATE OR REPLACE FUNCTION ttl.describe(tbl regclass) RETURNS TABLE (option text, value text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;
