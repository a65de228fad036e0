-- Strict visibility ("ttl_strict" = true): expired rows and values hidden from readers.
--
-- Rows: a RESTRICTIVE row security policy FOR SELECT hides expired rows from
-- every role subject to row security (not the owner, superusers, BYPASSRLS).
-- If the table had no row security, pg_ttl turns it on with one permissive
-- policy that allows everything, so nothing else changes for anyone.
-- Values: a security_invoker view ttl_live.<table> shows expired values as
-- NULL; roles that put ttl_live first in their search_path read it instead of
-- the table.

-- SQL that is true while the row is visible (not expired).
CREATE OR REPLACE FUNCTION ttl._visible_sql(p ttl.policy) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('COALESCE(%s OPERATOR(pg_catalog.>) pg_catalog.now(), true)', ttl._row_expiry_sql(p))
$fn$;

CREATE OR REPLACE FUNCTION ttl._strict_sync(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- The ttl_live view of a table: same columns, expired rows filtered, expired
-- values NULL. SECURITY DEFINER because ttl_live is writable by
-- pg_ttl only (roles put it first in their search_path); everything it does is
-- derived from the catalog, so calling it for any table is harmless.
CREATE OR REPLACE FUNCTION ttl._strict_view_sync(tbl oid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
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
    IF NOT (has_policy AND p.strict_visibility)
       OR NOT (p.value_ttls OR EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = tbl)) THEN
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
             CASE WHEN ttl._value_expiry_sql(tbl, a.attnum) IS NULL THEN format('t.%I', a.attname)
                  -- NULL also for NOT NULL columns: a DEFAULT such as nextval() must not run on reads.
                  ELSE format('CASE WHEN %s OPERATOR(pg_catalog.<=) pg_catalog.now() THEN NULL::%s ELSE t.%I END AS %I',
                              ttl._value_expiry_sql(tbl, a.attnum), format_type(a.atttypid, a.atttypmod),
                              a.attname, a.attname) END,
             ', ' ORDER BY a.attnum)
      INTO cols
      FROM pg_attribute a
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._drop_live_view(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;


-- Whether a table's ttl_live view no longer shows its columns (one was added,
-- dropped or renamed, or the view went with a dropped column).
CREATE OR REPLACE FUNCTION ttl._live_view_stale(tbl oid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
                      WHERE a.attrelid = v.oid AND a.attnum > 0), '{}')
           IS DISTINCT FROM
           (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
             WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped)
      FROM (SELECT (SELECT r.ev_class FROM pg_rewrite r
                      JOIN pg_depend d ON d.objid = r.oid AND d.classid = 'pg_rewrite'::regclass
                      JOIN pg_class c ON c.oid = r.ev_class
                      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'ttl_live'
                     WHERE d.refobjid = tbl LIMIT 1) AS oid) AS v
$fn$;
