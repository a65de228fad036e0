-- The table TTL options, defined once: ttl.options names each one, the
-- ttl.policy column that holds it, its kind (how a text value is read) and its
-- default. Applying, resetting, filling defaults, describing and dumping a
-- policy all read it; adding an option is a row here, the column (a
-- migration) and a line in the docs.

-- Option names follow CockroachDB's row-level TTL (ttl_expire_after, ...);
-- the SQL API accepts them with or without the ttl_ prefix.
CREATE OR REPLACE VIEW ttl.options AS
SELECT o.position, o.name, o.policy_column, o.kind, o.default_value, o.description
  FROM (VALUES
    (1, 'column', 'ttl_attnum', 'column', NULL,
     'The column a row''s age counts from: date, timestamp, timestamptz, or Unix time with "ttl_unit".'),
    (2, 'expiration_expression', 'expiration_expression', 'expression', NULL,
     'Instead of a column: one timestamptz expression over the row; the row expires once it has passed.'),
    (3, 'expire_after', 'expire_after', 'interval', NULL::text,
     'How long a row lives, counted from "ttl_column" (or from each write when no column is set).'),
    (4, 'unit', 'unit', 'unit', NULL,
     'Unix time unit of a numeric "ttl_column": seconds, milliseconds, microseconds or nanoseconds.'),
    (5, 'job_cron', 'job_cron', 'cron',
     coalesce((SELECT s.value FROM ttl.settings s WHERE s.name = 'default_job_cron'), '@hourly'),
     'When the worker runs this table (cron); the default is the default_job_cron setting.'),
    (6, 'job_cron_override', 'job_cron_override', 'bool', 'false',
     'Allow a schedule more frequent than the min_job_interval setting.'),
    (7, 'select_batch_size', 'select_batch_size', 'batch', '10000',
     'Rows examined per step of a sweep over block ranges (at least 1); windows through an index on the TTL column are sized by time.'),
    (8, 'delete_batch_size', 'delete_batch_size', 'batch', '1000',
     'Most rows one DELETE removes (at least 1).'),
    (9, 'select_rate_limit', 'select_rate_limit', 'rate', '0',
     'Most rows examined per second (0: unlimited).'),
    (10, 'delete_rate_limit', 'delete_rate_limit', 'rate', '0',
     'Most rows deleted per second (0: unlimited).'),
    (11, 'pause', 'paused', 'bool', 'false',
     'Skip this table (each skipped run is recorded).'),
    (12, 'partition_action', 'partition_action', 'partition_action', 'drop',
     'What happens to a range partition whose rows have all expired: drop, or detach to "ttl_detach_schema".'),
    (13, 'detach_schema', 'detach_schema', 'schema', NULL,
     'The schema detached partitions move to.'),
    (14, 'strict', 'strict_visibility', 'bool', 'false',
     'Hide expired rows from queries before they are deleted (row security).'),
    (15, 'value_ttl_overrides_table_ttl', 'value_ttl_overrides_table_ttl', 'bool', 'false',
     'Per-row TTL: a row''s own TTL (USING TTL) replaces the table TTL even when shorter; a range partition is dropped once everything written to it expired, without also waiting the table TTL after its latest write.'),
    (16, 'queue_shards', 'queue_shards', 'shards', '0',
     'Keep each row''s expiry in this many side tables (an expiration queue): a pass reads only what expired, with no index on the table (0: no queue).'),
    (17, 'value_ttls', 'value_ttls', 'bool', 'false',
     'CQL-style per-row TTL: every value outside the primary key has its own TTL (USING TTL of the write that set it, else "ttl_expire_after", 0 = never); UPDATE never moves the row''s TTL; a row goes once it and all its values expired.'),
    (18, 'ignore_value_ttl', 'ignore_value_ttl', 'bool', 'false',
     'Per-row TTL: drop a range partition once "ttl_expire_after" has passed since its latest write, even if rows or values in it were written with a longer TTL (they are lost).'),
    (19, 'archive_batch_size', 'archive_batch_size', 'batch', '50000',
     'Storage tiers to a directory or S3: rows read per step (none locked while they are written to storage); a step''s DELETE is one transaction, and its rows make one object per day (at least 1).')
  ) AS o(position, name, policy_column, kind, default_value, description);

GRANT SELECT ON ttl.options TO PUBLIC;

CREATE OR REPLACE FUNCTION ttl._option_key(option text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- "column_name" is ttl.enable's parameter for "column" (a reserved word in SQL): accepted as the same option.
    SELECT CASE k WHEN 'column_name' THEN 'column' ELSE k END
      FROM (SELECT CASE WHEN lower(btrim(option)) LIKE 'ttl\_%'
                        THEN substr(lower(btrim(option)), 5)
                        ELSE lower(btrim(option)) END) AS o(k)
$fn$;

-- How errors quote an option: the DDL spelling, e.g. "ttl_expire_after".
CREATE OR REPLACE FUNCTION ttl._option_label(option text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT '"ttl_' || ttl._option_key(option) || '"'
$fn$;

CREATE OR REPLACE FUNCTION ttl.option_names() RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT array_agg(o.name ORDER BY o.position) FROM ttl.options o
$fn$;

-- The name of an option as ttl.options has it, or a clear error.
CREATE OR REPLACE FUNCTION ttl._option(option text, accepted_extra text DEFAULT '') RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ttl.options o WHERE o.name = ttl._option_key(option)) THEN
        RAISE EXCEPTION 'unknown TTL option %', ttl._option_label(coalesce(option, ''))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Accepted options: ' || accepted_extra || 'ttl_'
                         || array_to_string(ttl.option_names(), ', ttl_') || '.';
    END IF;
    RETURN ttl._option_key(option);
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

-- Apply one named option (text value, as DDL and set_option give it) to a
-- policy row. NULL clears an option that has no default.
CREATE OR REPLACE FUNCTION ttl._apply_option(p ttl.policy, option text, value text) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    o record;
    v text;
BEGIN
    SELECT * INTO o FROM ttl.options WHERE name = ttl._option(option);
    IF value IS NULL AND o.default_value IS NOT NULL THEN
        RAISE EXCEPTION 'value of % must not be NULL', ttl._option_label(option)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use ttl.reset_option to restore its default.';
    END IF;
    IF value IS NOT NULL THEN
        v := CASE o.kind
            WHEN 'interval' THEN ttl._to_interval(option, value)::text
            WHEN 'column' THEN ttl._attnum(p.relid::regclass, value, option)::text
            WHEN 'expression' THEN nullif(btrim(value), '')
            WHEN 'unit' THEN lower(btrim(value))
            WHEN 'partition_action' THEN lower(btrim(value))
            WHEN 'cron' THEN btrim(value)
            WHEN 'bool' THEN ttl._to_bool(option, value)::text
            WHEN 'batch' THEN ttl._to_int(option, value)::text
            WHEN 'rate' THEN ttl._to_int(option, value)::text
            WHEN 'shards' THEN ttl._to_int(option, value)::text
            ELSE value
        END;
    END IF;
    RETURN jsonb_populate_record(p, jsonb_build_object(o.policy_column, v));
END
$fn$;

-- Put an option back to its default (NULL for those without one).
CREATE OR REPLACE FUNCTION ttl._reset_option(p ttl.policy, option text) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    o record;
BEGIN
    SELECT * INTO o FROM ttl.options WHERE name = ttl._option(option, 'ttl, ');
    RETURN jsonb_populate_record(p, jsonb_build_object(o.policy_column, o.default_value));
END
$fn$;

-- Every option left NULL that has a default gets it: a new policy, and a
-- direct INSERT INTO ttl.policy that names only some options.
CREATE OR REPLACE FUNCTION ttl._fill_defaults(p ttl.policy) RETURNS ttl.policy
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT jsonb_populate_record(p, coalesce(jsonb_object_agg(o.policy_column, o.default_value), '{}'))
      FROM ttl.options o
     WHERE o.default_value IS NOT NULL AND to_jsonb(p) -> o.policy_column = 'null'::jsonb
$fn$;

-- The SQL API's functions raise one error without the CONTEXT lines of the
-- functions they call (psql prints them all); SET pg_ttl.verbose_errors = on
-- keeps them, for debugging.
CREATE OR REPLACE FUNCTION ttl._verbose_errors() RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(current_setting('pg_ttl.verbose_errors', true), '') IN ('on', 'true', '1', 'yes')
$fn$;
