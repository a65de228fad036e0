-- Changes pg_ttl makes to users' tables when their TTL policies change: the
-- added columns, DEFAULTs and triggers of per-row and column TTL, kept in step
-- with the catalog by triggers on ttl.policy and ttl.column_policy.

-- Entering or leaving per-row mode, and the strict flag's bookkeeping. Runs
-- before the validation trigger ("a_" sorts first), so validation sees the
-- final row. Adding columns here is safe: a failed validation rolls them back.
CREATE OR REPLACE FUNCTION ttl._policy_row_mode() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := NEW.relid::regclass;
    managed text;
    col name;
BEGIN
    NEW := ttl._fill_defaults(NEW);
    NEW.strict_enabled_rls := coalesce(NEW.strict_enabled_rls, false);

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
$fn$;

-- Column policies: resolve relative_to and add the tracking column.
CREATE OR REPLACE FUNCTION ttl._column_policy_mode() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- Make a table's added columns, DEFAULTs and triggers match the catalog.
CREATE OR REPLACE FUNCTION ttl._sync_table(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- Drop a column pg_ttl added, if it is still there.
CREATE OR REPLACE FUNCTION ttl._drop_added_column(tbl oid, n smallint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF n IS NOT NULL AND EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) AND ttl._attname(tbl, n) IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s DROP COLUMN %I', tbl::regclass, ttl._attname(tbl, n));
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl._policy_after() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._column_policy_after() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

DROP TRIGGER IF EXISTS a_row_ttl ON ttl.policy;
CREATE TRIGGER a_row_ttl BEFORE INSERT OR UPDATE ON ttl.policy
    FOR EACH ROW EXECUTE FUNCTION ttl._policy_row_mode();
DROP TRIGGER IF EXISTS z_row_ttl_sync ON ttl.policy;
CREATE TRIGGER z_row_ttl_sync AFTER INSERT OR UPDATE OR DELETE ON ttl.policy
    FOR EACH ROW EXECUTE FUNCTION ttl._policy_after();
DROP TRIGGER IF EXISTS a_row_ttl ON ttl.column_policy;
CREATE TRIGGER a_row_ttl BEFORE INSERT OR UPDATE ON ttl.column_policy
    FOR EACH ROW EXECUTE FUNCTION ttl._column_policy_mode();
DROP TRIGGER IF EXISTS z_row_ttl_sync ON ttl.column_policy;
CREATE TRIGGER z_row_ttl_sync AFTER INSERT OR UPDATE OR DELETE ON ttl.column_policy
    FOR EACH ROW EXECUTE FUNCTION ttl._column_policy_after();

-- Column TTL with an explicit base: 'row' (the table's TTL column, or the
-- write time of a per-row TTL table) or 'write' (the value's own write time).
CREATE OR REPLACE FUNCTION ttl.enable_column(tbl regclass, column_name name, expire_after interval,
                                             relative_to text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;
