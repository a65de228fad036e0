-- The SQL API: plain function calls any table owner can make from psql.
-- Functions are SECURITY INVOKER: row security on ttl.policy and the
-- validation trigger apply to every caller, whatever the entry point.

-- A new policy row: every option at its default (sql/08_options.sql).
CREATE OR REPLACE FUNCTION ttl._default_policy(tbl regclass) RETURNS ttl.policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    p.relid := tbl;
    p.created_at := now();
    p.updated_at := now();
    RETURN ttl._fill_defaults(p);
END
$fn$;

CREATE OR REPLACE FUNCTION ttl._get_policy(tbl regclass) RETURNS ttl.policy
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl FOR UPDATE;
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
DECLARE
    old_p ttl.policy;
BEGIN
    IF NOT is_new THEN
        SELECT * INTO old_p FROM ttl.policy WHERE relid = p.relid;
    END IF;
    PERFORM ttl._apply_change(old_p, p);
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
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
BEGIN
    PERFORM ttl._check_table(tbl);
    IF EXISTS (SELECT 1 FROM ttl.policy WHERE relid = tbl) THEN
        RAISE EXCEPTION 'table % already has a TTL', tbl USING ERRCODE = 'duplicate_object',
            HINT = format('Change it with ttl.set_option(%L, ...), or remove it with ttl.disable(%L).', tbl::text, tbl::text);
    END IF;
    -- The same path as every other entry point: named options, read by the registry.
    PERFORM ttl.set_options(tbl, jsonb_strip_nulls(jsonb_build_object(
        'expire_after', expire_after, 'column', column_name, 'expiration_expression', expiration_expression,
        'unit', unit, 'job_cron', job_cron, 'select_batch_size', select_batch_size,
        'delete_batch_size', delete_batch_size, 'select_rate_limit', select_rate_limit,
        'delete_rate_limit', delete_rate_limit, 'pause', pause, 'partition_action', partition_action,
        'detach_schema', detach_schema, 'job_cron_override', job_cron_override)));
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

-- Set several options at once (what TTL DDL turns into). The policy row is
-- locked first: two sessions changing one table's TTL take turns, and neither
-- loses the other's change. On a table without
-- TTL this enables it, so "ttl_expire_after" and/or "ttl_expiration_expression"
-- must be among them.
CREATE OR REPLACE FUNCTION ttl.set_options(tbl regclass, options jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    p ttl.policy;
    is_new boolean;
    kv record;
    orphan jsonb;
    tiers text;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF jsonb_typeof(options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object of option names and values'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- ttl_orphan_* options (TTL DDL) belong to the orphan policy (sql/80_orphans.sql).
    orphan := (SELECT jsonb_object_agg(o.key, o.value) FROM jsonb_each(options) AS o
                WHERE ttl._option_key(o.key) LIKE 'orphan\_%');
    IF orphan IS NOT NULL THEN
        PERFORM ttl.set_orphan_options(tbl, orphan);
        options := options - ARRAY(SELECT jsonb_object_keys(orphan));
        IF options = '{}'::jsonb THEN
            RETURN;
        END IF;
    END IF;
    -- ttl_tiers (TTL DDL) goes to ttl.set_tiers once the policy is saved (sql/82_tiers.sql).
    tiers := (SELECT o.value #>> '{}' FROM jsonb_each(options) AS o WHERE ttl._option_key(o.key) = 'tiers');
    options := options - ARRAY(SELECT o.key FROM jsonb_each(options) AS o WHERE ttl._option_key(o.key) = 'tiers');
    IF options = '{}'::jsonb AND tiers IS NOT NULL THEN
        PERFORM ttl.set_tiers(tbl, ttl._tiers_json(tiers));
        RETURN;
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl FOR UPDATE;
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
    IF tiers IS NOT NULL THEN
        PERFORM ttl.set_tiers(tbl, ttl._tiers_json(tiers));
    END IF;
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl.set_option(tbl regclass, option text, value text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
BEGIN
    PERFORM ttl._check_table(tbl);
    PERFORM ttl._get_policy(tbl);
    PERFORM ttl.set_options(tbl, jsonb_build_object(option, value));
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

-- Restore options to their defaults. "ttl" alone removes the TTL (RESET (ttl)).
CREATE OR REPLACE FUNCTION ttl.reset_options(tbl regclass, VARIADIC options text[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    p ttl.policy;
    opt text;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF 'ttl' = ANY (SELECT lower(btrim(o)) FROM unnest(options) AS o) THEN
        PERFORM ttl.disable(tbl);
        RETURN;
    END IF;
    -- ttl_orphan_*: the parent, key or age column gone, so is the orphan policy;
    -- the others go back to their defaults.
    IF EXISTS (SELECT 1 FROM unnest(options) AS o WHERE ttl._option_key(o) LIKE 'orphan\_%') THEN
        IF EXISTS (SELECT 1 FROM unnest(options) AS o
                    WHERE ttl._option_key(o) IN ('orphan_of', 'orphan_key', 'orphan_age_column')) THEN
            PERFORM ttl.disable_orphans(tbl);
        ELSE
            PERFORM ttl.set_orphan_options(tbl, (SELECT jsonb_object_agg(ttl._option_key(o), NULL)
                                                   FROM unnest(options) AS o
                                                  WHERE ttl._option_key(o) LIKE 'orphan\_%'));
        END IF;
        options := ARRAY(SELECT o FROM unnest(options) AS o WHERE ttl._option_key(o) NOT LIKE 'orphan\_%');
        IF cardinality(options) = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(options) AS o WHERE ttl._option_key(o) = 'tiers') THEN
        PERFORM ttl.set_tiers(tbl, '[]');
        options := ARRAY(SELECT o FROM unnest(options) AS o WHERE ttl._option_key(o) <> 'tiers');
        IF cardinality(options) = 0 THEN
            RETURN;
        END IF;
    END IF;
    p := ttl._get_policy(tbl);
    FOREACH opt IN ARRAY options LOOP
        p := ttl._reset_option(p, opt);
    END LOOP;
    PERFORM ttl._save_policy(p, false);
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl.reset_option(tbl regclass, option text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.reset_options(tbl, VARIADIC ARRAY[option])
$fn$;

-- Removes the table's TTL: its policy, column policies and orphan policy.
CREATE OR REPLACE FUNCTION ttl.disable(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    p ttl.policy;
    c ttl.column_policy;
    found_any boolean := false;
BEGIN
    PERFORM ttl._check_table(tbl);
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl FOR UPDATE;
    IF FOUND THEN
        PERFORM ttl._apply_change(p, NULL);
        found_any := true;
    END IF;
    FOR c IN SELECT * FROM ttl.column_policy cp WHERE cp.relid = tbl ORDER BY cp.attnum LOOP
        PERFORM ttl._apply_column_change(c, NULL);
        found_any := true;
    END LOOP;
    DELETE FROM ttl.orphan_policy WHERE relid = tbl;
    found_any := found_any OR FOUND;
    IF NOT found_any THEN
        RAISE EXCEPTION 'table % has no TTL', tbl USING ERRCODE = 'undefined_object';
    END IF;
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
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
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
BEGIN
    PERFORM ttl._set_column_policy(tbl, column_name, expire_after, NULL);
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl.disable_column(tbl regclass, column_name name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    c ttl.column_policy;
BEGIN
    PERFORM ttl._check_table(tbl);
    SELECT * INTO c FROM ttl.column_policy cp WHERE cp.relid = tbl AND cp.attnum = ttl._attnum(tbl, column_name, 'column');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of table % has no TTL', column_name, tbl USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM ttl._apply_column_change(c, NULL);
EXCEPTION WHEN OTHERS THEN  -- one error without the nested calls' CONTEXT lines (ttl._verbose_errors)
    GET STACKED DIAGNOSTICS e_state = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
                            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
    IF ttl._verbose_errors() THEN RAISE; END IF;
    IF e_detail = '' AND e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message;
    ELSIF e_detail = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, HINT = e_hint;
    ELSIF e_hint = '' THEN RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail;
    ELSE RAISE EXCEPTION USING ERRCODE = e_state, MESSAGE = e_message, DETAIL = e_detail, HINT = e_hint;
    END IF;
END
$fn$;

-- A table's options as (option, value) rows, in the registry's order, values
-- as the SQL API accepts them back.
CREATE OR REPLACE FUNCTION ttl._option_values(p ttl.policy) RETURNS TABLE (option text, value text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT 'ttl_' || o.name,
           CASE o.kind WHEN 'column' THEN ttl._attname(p.relid, p.ttl_attnum)::text
                       ELSE to_jsonb(p) ->> o.policy_column END
      FROM ttl.options o
     ORDER BY o.position
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
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = tbl)
       AND NOT EXISTS (SELECT 1 FROM ttl.orphan_policy o WHERE o.relid = tbl) THEN
        RAISE EXCEPTION 'table % has no TTL', tbl USING ERRCODE = 'undefined_object';
    END IF;
    IF FOUND THEN
        RETURN QUERY VALUES ('table', tbl::text);
        RETURN QUERY SELECT * FROM ttl._option_values(p);
        RETURN QUERY VALUES ('ttl_tiers', ttl._tiers_text(tbl));
        RETURN QUERY VALUES
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
    RETURN QUERY SELECT * FROM ttl._orphan_values(tbl);
END
$fn$;

-- A table named as a caller writes it in SQL (`name`), resolved in `names_path` (the
-- caller's search_path: pass current_setting('search_path') for the session's; inside,
-- this function's own is pinned), for pg-ttl run and the Python API: its oid (NULL: no
-- such table) and whether any TTL policy (table, column or orphan) names it, in one
-- round trip. Only the name is read in the caller's path: the policies are read back in
-- this function's own.
CREATE OR REPLACE FUNCTION ttl._resolve_table(name text, names_path text, OUT relid oid, OUT has_policy boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pg_catalog.set_config('search_path', names_path, true);
    relid := pg_catalog.to_regclass(name);
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    has_policy := relid IS NOT NULL AND (EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = _resolve_table.relid)
                                         OR EXISTS (SELECT 1 FROM ttl.column_policy c
                                                     WHERE c.relid = _resolve_table.relid)
                                         OR EXISTS (SELECT 1 FROM ttl.orphan_policy o
                                                     WHERE o.relid = _resolve_table.relid));
END
$fn$;
