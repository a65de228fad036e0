-- Per-row TTL and column (value) TTL: the columns, DEFAULTs and triggers they add.
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

-- A per-write TTL as given: refused when negative (it would write rows that
-- have already expired). Every reader of the override goes through here, so
-- SET pg_ttl.row_ttl = '-10 seconds' is refused as ttl.using_ttl is.
CREATE OR REPLACE FUNCTION ttl._check_row_ttl(ttl interval) RETURNS interval
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ttl < interval '0' THEN
        RAISE EXCEPTION 'a TTL must not be negative, got %', ttl USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Give an interval > 0 (ttl.using_ttl or pg_ttl.row_ttl), or 0 for "never expires".';
    END IF;
    RETURN ttl;
END
$fn$;

-- The per-transaction override, NULL when none.
CREATE OR REPLACE FUNCTION ttl._row_ttl_override() RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl._check_row_ttl(nullif(current_setting('pg_ttl.row_ttl', true), '')::interval)
$fn$;

-- local => false: for the rest of the session (until RESET pg_ttl.row_ttl or
-- the next call), which also works in autocommit mode, where a
-- transaction-local override would end with this very statement.
CREATE OR REPLACE FUNCTION ttl.using_ttl(ttl interval, local boolean) RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM ttl._check_row_ttl(ttl);
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

-- CQL's USING TTL for one statement on `tbl` (what TTL DDL's rewrite calls):
-- refused, naming the table or column, where nothing would keep the TTL
-- (never silently ignored, never widened to more than the write). `columns`:
-- the columns an UPDATE sets; NULL for an INSERT.
CREATE OR REPLACE FUNCTION ttl.using_ttl(ttl interval, tbl regclass, columns name[] DEFAULT NULL) RETURNS interval
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    c name;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    -- Per-row TTL: the row's TTL (CQL-style: the marker and the values written).
    IF p.row_expiry_attnum IS NOT NULL THEN
        RETURN ttl.using_ttl(ttl, true);
    END IF;
    IF columns IS NULL THEN
        RAISE EXCEPTION 'USING TTL cannot apply to table %: %', tbl,
            CASE WHEN p.relid IS NULL THEN 'it keeps no TTL per row'
                 WHEN p.ttl_attnum IS NOT NULL THEN format('its rows expire by their column %I, not by a TTL per write',
                                                           ttl._attname(p.relid, p.ttl_attnum))
                 ELSE 'its rows expire by "ttl_expiration_expression", not by a TTL per write' END
            USING ERRCODE = 'feature_not_supported',
                  HINT = format('Make it CQL-style (ALTER TABLE %s SET (default_time_to_live = <seconds, 0: none>)) or give it a per-row TTL ("ttl_expire_after" without "ttl_column").', tbl);
    END IF;
    FOREACH c IN ARRAY columns LOOP
        IF NOT EXISTS (SELECT 1 FROM ttl.column_policy cp
                        WHERE cp.relid = tbl AND cp.relative_to = 'write' AND cp.attnum = ttl._attnum(tbl, c, 'column')) THEN
            RAISE EXCEPTION 'USING TTL cannot apply to column "%" of table %: its values keep no TTL per write', c, tbl
                USING ERRCODE = 'feature_not_supported',
                      HINT = format('Make the table CQL-style (ALTER TABLE %s SET (default_time_to_live = <seconds>)), or give the column a TTL counted from writes (ALTER TABLE %s ALTER COLUMN %I SET (ttl_expire_after = ''...'', ttl_relative_to = write)).',
                                    tbl, tbl, c);
        END IF;
    END LOOP;
    RETURN ttl.using_ttl(ttl, true);
END
$fn$;

-- Expiry of a value written now, with table/column TTL `default_ttl`. Calendar
-- arithmetic in UTC, as the engine's (sql/15_expiry.sql): a day is 24 hours
-- whatever the writer's TimeZone.
CREATE OR REPLACE FUNCTION ttl.row_expires_at(default_ttl interval, override_wins boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    o interval := ttl._row_ttl_override();
BEGIN
    IF o IS NULL THEN
        RETURN timezone('UTC', timezone('UTC', now()) + default_ttl);
    ELSIF o = interval '0' THEN
        RETURN NULL;
    ELSIF override_wins THEN
        RETURN timezone('UTC', timezone('UTC', now()) + o);
    END IF;
    RETURN timezone('UTC', timezone('UTC', now()) + greatest(o, default_ttl));
END
$fn$;

-- The same for column DEFAULTs: the usual write (no override) is inline SQL,
-- since a function with a SET clause is never inlined and inlining keeps INSERT
-- cost near a plain column; a write with an override calls ttl.row_expires_at.
-- Built-ins are schema-qualified; the DEFAULT is stored parsed, so the
-- reader's search_path does not matter afterwards.
CREATE OR REPLACE FUNCTION ttl._expiry_default_sql(default_ttl interval, override_wins boolean) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format(
        $f$CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL
                     THEN pg_catalog.timezone('UTC'::text, pg_catalog.timezone('UTC'::text, pg_catalog.now()) + %1$L::interval)
                ELSE ttl.row_expires_at(%1$L::interval, %2$L::boolean) END$f$,
        default_ttl::text, override_wins::text)
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
                NEW.ttl_expires_at := timezone('UTC', timezone('UTC', now()) + TG_ARGV[2]::interval);
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
    -- A second write of the value in the same transaction leaves its range
    -- unchanged (same now()): its trigger says it ran for this row instead.
    IF current_setting('pg_ttl.value_written', true) = TG_RELID::text THEN
        override_for_values := true;
        PERFORM set_config('pg_ttl.value_written', '', true);
    END IF;
    patch := jsonb_build_object(TG_ARGV[1], now());
    IF (n -> TG_ARGV[0]) IS NOT DISTINCT FROM (o -> TG_ARGV[0]) THEN
        patch := patch || jsonb_build_object(TG_ARGV[0],
            CASE WHEN override_for_values THEN timezone('UTC', timezone('UTC', now()) + TG_ARGV[2]::interval)
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
    -- For the row's trigger (ttl._refresh_row_expiry), which runs next: the
    -- statement's TTL was this value's, not the row's.
    PERFORM set_config('pg_ttl.value_written', TG_RELID::text, true);
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
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF p.value_ttls THEN  -- CQL-style: every value column (sql/73_value_ttls.sql)
        RETURN CASE WHEN col IN (SELECT ttl._value_columns(p)) THEN ttl._cell_sql(p, col, 1) END;
    END IF;
    SELECT * INTO cp FROM ttl.column_policy WHERE relid = tbl AND attnum = col;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF cp.relative_to = 'write' THEN
        RETURN format('pg_catalog.upper(%I)', ttl._attname(tbl, cp.track_attnum));
    END IF;
    IF p.row_write_attnum IS NOT NULL THEN
        RETURN ttl._expiry_sql('pg_catalog.timestamptz'::regtype, NULL, cp.expire_after,
                               format('%I', ttl._attname(tbl, p.row_write_attnum)));
    ELSIF p.ttl_attnum IS NOT NULL THEN
        RETURN ttl._expiry_sql(p.ttl_atttypid, p.unit, cp.expire_after, format('%I', ttl._attname(tbl, p.ttl_attnum)));
    END IF;
    RETURN NULL;  -- the table TTL lost its base (e.g. became an expression): never
END
$fn$;
