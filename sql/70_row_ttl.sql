-- Per-row TTL, column (value) TTL, ttl.ttl() / ttl.write_time(), strict visibility.
--
-- Per-row TTL: a table TTL with "ttl_expire_after" but no "ttl_column" adds two
-- columns to the table: ttl_expires_at (the row's absolute expiry, NULL = never)
-- and ttl_written_at (its last write). INSERT fills them through column
-- DEFAULTs (no INSERT trigger: a DEFAULT costs far less per row); a BEFORE
-- UPDATE trigger refreshes them unless the statement set ttl_expires_at itself.
-- The policy then becomes an expression policy on ttl_expires_at, so the engine
-- expires these rows like any expression policy.
--
-- Per-write override (CQL USING TTL): SET LOCAL pg_ttl.row_ttl = '10 seconds' or
-- SELECT ttl.using_ttl('10 seconds') in the writing transaction; 0 = never.
-- Table TTL vs the override: the later expiry wins, unless the policy sets
-- "ttl_value_ttl_overrides_table_ttl" (then the override wins, also when shorter).
-- A value with a write-time column TTL takes the override as its own TTL (as
-- CQL's USING TTL on the cells it writes); the row then keeps the table TTL.
--
-- Column TTL counts either from the table's TTL base ('row': the TTL column, or
-- ttl_written_at of a per-row table) or from the value's own write time ('write':
-- a tstzrange column ttl_cell_<column> = [write time, expiry) per TTL'd column,
-- filled by a DEFAULT, refreshed by a BEFORE UPDATE OF <column> trigger, so an
-- UPDATE that sets the column restarts its TTL, with the override if any).

-- The per-transaction override, NULL when none.
CREATE OR REPLACE FUNCTION ttl._row_ttl_override() RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT nullif(current_setting('pg_ttl.row_ttl', true), '')::interval
$fn$;

-- local => false: for the rest of the session (until RESET pg_ttl.row_ttl or
-- the next call), which also works in autocommit mode, where a
-- transaction-local override would end with this very statement.
CREATE OR REPLACE FUNCTION ttl.using_ttl(ttl interval, local boolean) RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- CQL's USING TTL: rows (and tracked values) written by the rest of this
-- transaction expire `ttl` after their write; 0 means never.
CREATE OR REPLACE FUNCTION ttl.using_ttl(ttl interval) RETURNS interval
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl.using_ttl(ttl, true)
$fn$;

-- Expiry of a value written now, with table/column TTL `default_ttl`.
CREATE OR REPLACE FUNCTION ttl.row_expires_at(default_ttl interval, override_wins boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- The same as an inline expression for column DEFAULTs: a function with a SET
-- clause is never inlined, and inlining keeps INSERT cost near a plain column.
-- Built-ins are schema-qualified; the DEFAULT is stored parsed, so the
-- reader's search_path does not matter afterwards.
CREATE OR REPLACE FUNCTION ttl._expiry_default_sql(default_ttl interval, override_wins boolean) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format(
        $f$CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL
                     THEN pg_catalog.now() + %1$L::interval
                WHEN pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval = '0'::interval THEN NULL
                ELSE pg_catalog.now() + %2$s END$f$,
        default_ttl::text,
        CASE WHEN override_wins THEN $f$pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval$f$
             ELSE format($f$GREATEST(pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval, %L::interval)$f$,
                         default_ttl::text) END)
$fn$;

-- BEFORE UPDATE on a per-row TTL table.
-- TG_ARGV: expiry column, write-time column, expire_after, override_wins,
-- then the tracking columns of write-time column TTLs.
CREATE OR REPLACE FUNCTION ttl._refresh_row_expiry() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- BEFORE UPDATE OF <column> on a table with a write-time column TTL.
-- TG_ARGV: cell column, expire_after, override_wins.
CREATE OR REPLACE FUNCTION ttl._refresh_cell() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- A column name pg_ttl may add: `wanted`, unless a column of that name exists
-- that pg_ttl did not add (then an error names it).
CREATE OR REPLACE FUNCTION ttl._added_column_name(tbl regclass, wanted text) RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    wanted := left(wanted, 63);
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tbl AND attname = wanted AND NOT attisdropped) THEN
        RAISE EXCEPTION 'table % already has a column "%", which pg_ttl needs for its TTL bookkeeping', tbl, wanted
            USING ERRCODE = 'duplicate_column',
                  HINT = 'Rename that column, or use "ttl_column" / "ttl_expiration_expression" instead.';
    END IF;
    RETURN wanted;
END
$fn$;

-- Row base time (what a 'row' column TTL counts from) as timestamptz SQL over
-- the table's columns, or NULL when the policy has none (expression policies).
-- The TTL column's instant comes from the one expiry definition (sql/15_expiry.sql).
CREATE OR REPLACE FUNCTION ttl._base_sql(p ttl.policy) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p.row_write_attnum IS NOT NULL THEN
        RETURN format('%I', ttl._attname(p.relid, p.row_write_attnum));
    END IF;
    IF p.ttl_attnum IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN ttl._expiry_sql(p.ttl_atttypid, p.unit, interval '0', format('%I', ttl._attname(p.relid, p.ttl_attnum)));
END
$fn$;

-- A column value's expiry as SQL over the table's columns (NULL result = never).
CREATE OR REPLACE FUNCTION ttl._value_expiry_sql(tbl oid, col smallint) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
    IF p.row_write_attnum IS NOT NULL THEN
        RETURN ttl._expiry_sql('pg_catalog.timestamptz'::regtype, NULL, cp.expire_after,
                               format('%I', ttl._attname(tbl, p.row_write_attnum)));
    ELSIF p.ttl_attnum IS NOT NULL THEN
        RETURN ttl._expiry_sql(p.ttl_atttypid, p.unit, cp.expire_after, format('%I', ttl._attname(tbl, p.ttl_attnum)));
    END IF;
    RETURN NULL;  -- the table TTL lost its base (e.g. became an expression): never
END
$fn$;

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

-- ---------------------------------------------------------------------------
-- ttl.ttl() and ttl.write_time()

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
BEGIN
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = ttl._attnum(tbl::regclass, column_name, 'column');
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF cp.relative_to = 'write' THEN
        RETURN ttl._eval_on_row(r, format('pg_catalog.lower(%I)', ttl._attname(tbl, cp.track_attnum)), tbl);
    END IF;
    RETURN ttl.write_time(r);
END
$fn$;

-- ---------------------------------------------------------------------------
-- Strict visibility ("ttl_strict" = true)
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
                  ELSE format('CASE WHEN %s OPERATOR(pg_catalog.<=) pg_catalog.now() THEN NULL::%s ELSE t.%I END AS %I',
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

-- ---------------------------------------------------------------------------
-- Column nulling, for the engine (pg_ttl/expire/columns.py). One bounded batch
-- on one table or leaf partition: expired values become NULL (or DEFAULT for
-- NOT NULL columns); the expiry is re-checked in the UPDATE itself, rows locked
-- by the application are skipped. Returns the number of rows changed.
CREATE OR REPLACE FUNCTION ttl.null_expired_values(tbl regclass, part regclass, column_name name, batch integer,
                                                   cutoff timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
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
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz', expiry, cutoff);
    ELSIF a.attnotnull THEN
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz AND %I IS DISTINCT FROM %s', expiry, cutoff, column_name,
                          (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute x
                               ON x.attrelid = d.adrelid AND x.attnum = d.adnum
                            WHERE d.adrelid = part AND x.attname = column_name));
    ELSE
        pending := format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz AND %I IS NOT NULL', expiry, cutoff, column_name);
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
$fn$;
