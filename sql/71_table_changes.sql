-- Changes pg_ttl makes to users' tables when their TTL policies change: the
-- added columns, DEFAULTs and triggers of per-row and column TTL, and strict
-- visibility's row security and view. The SQL API makes every change through
-- ttl._apply_change / ttl._apply_column_change; the triggers on the catalog
-- only validate, and refuse a direct write that would need the table to change
-- (sql/10_validate.sql).

-- Entering or leaving per-row mode, and the strict flag's bookkeeping: the
-- policy row as it will be stored. Adding columns here is safe: a failed
-- validation rolls them back.
CREATE OR REPLACE FUNCTION ttl._row_mode(old_p ttl.policy, new_p ttl.policy) RETURNS ttl.policy
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := new_p.relid::regclass;
    managed text;
    col name;
BEGIN
    new_p := ttl._fill_defaults(new_p);
    new_p.strict_enabled_rls := coalesce(new_p.strict_enabled_rls, false);

    IF new_p.row_expiry_attnum IS NOT NULL THEN
        managed := ttl._managed_expression(new_p);
        IF new_p.ttl_attnum IS NOT NULL OR new_p.expiration_expression IS DISTINCT FROM managed
           OR new_p.expire_after IS NULL THEN
            -- Leaving per-row mode: ttl._apply_change drops the columns.
            IF new_p.expiration_expression IS NOT DISTINCT FROM managed OR new_p.expiration_expression IS NULL THEN
                new_p.expiration_expression := NULL;
            END IF;
            new_p.row_expiry_attnum := NULL;
            new_p.row_write_attnum := NULL;
            new_p.row_values_attnum := NULL;
        END IF;
    END IF;

    IF ttl._enters_row_mode(new_p) THEN
        PERFORM ttl._check_table(tbl);
        -- Entering per-row mode. Existing rows get a non-volatile default's
        -- "missing value" (no table rewrite): they expire expire_after from now.
        IF old_p.row_expiry_attnum IS NOT NULL AND ttl._attname(new_p.relid, old_p.row_expiry_attnum) IS NOT NULL THEN
            new_p.row_expiry_attnum := old_p.row_expiry_attnum;
            new_p.row_write_attnum := old_p.row_write_attnum;
            new_p.row_values_attnum := old_p.row_values_attnum;
        ELSE
            col := ttl._added_column_name(tbl, 'ttl_expires_at');
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I timestamptz DEFAULT %s', tbl, col, ttl._marker_default(new_p));
            new_p.row_expiry_attnum := ttl._attnum(tbl, col, 'column');
            col := ttl._added_column_name(tbl, 'ttl_written_at');
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I timestamptz DEFAULT pg_catalog.now()', tbl, col);
            new_p.row_write_attnum := ttl._attnum(tbl, col, 'column');
            RAISE NOTICE 'per-row TTL: added columns % (each row''s expiry) and % (its insert or last write) to table %',
                ttl._attname(new_p.relid, new_p.row_expiry_attnum), col,
                tbl::text || CASE WHEN new_p.value_ttls THEN '' ELSE ', and a trigger that moves the expiry on UPDATE' END
                USING HINT = 'To count from a column of your own instead, set "ttl_column" (ttl.enable(..., column_name => ...)); ttl.disable removes what was added.';
        END IF;
    END IF;

    IF new_p.row_expiry_attnum IS NOT NULL THEN
        -- A TTL per value (CQL-style): the values an UPDATE wrote, in one added jsonb column.
        IF new_p.value_ttls AND (new_p.row_values_attnum IS NULL OR ttl._attname(new_p.relid, new_p.row_values_attnum) IS NULL) THEN
            IF EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = new_p.relid) THEN
                RAISE EXCEPTION 'table % has column TTLs: a CQL-style table ("ttl_value_ttls") keeps a TTL per value already', tbl
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Remove them first (ttl.disable_column), then write each value with its TTL (USING TTL).';
            END IF;
            col := ttl._added_column_name(tbl, 'ttl_values');
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I jsonb', tbl, col);
            new_p.row_values_attnum := ttl._attnum(tbl, col, 'column');
            RAISE NOTICE 'value TTLs: added column % to table % (the TTLs of values written by UPDATE), and a trigger per column',
                col, tbl;
        ELSIF NOT new_p.value_ttls THEN
            new_p.row_values_attnum := NULL;  -- ttl._apply_change drops the column
        END IF;
        new_p.expiration_expression := ttl._managed_expression(new_p);
        IF new_p.value_ttls THEN
            PERFORM ttl._check_value_columns(new_p);
        END IF;
    END IF;

    IF new_p.strict_visibility AND NOT coalesce(old_p.strict_visibility, false) THEN
        -- Remember whether pg_ttl turned row security on, to turn it off again.
        new_p.strict_enabled_rls := NOT (SELECT relrowsecurity FROM pg_class WHERE oid = new_p.relid);
    ELSIF NOT new_p.strict_visibility THEN
        new_p.strict_enabled_rls := false;
    END IF;
    RETURN new_p;
END
$fn$;

-- "ttl_expire_after" alone (no column, no expression): per-row TTL, which
-- needs the columns pg_ttl adds.
CREATE OR REPLACE FUNCTION ttl._enters_row_mode(p ttl.policy) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT p.row_expiry_attnum IS NULL AND p.ttl_attnum IS NULL AND p.expiration_expression IS NULL
       AND p.expire_after IS NOT NULL
       AND (p.expire_after > interval '0' OR (coalesce(p.value_ttls, false) AND p.expire_after = interval '0'))
$fn$;

-- The expiration expression of a per-row TTL policy: its expiry column, or for
-- a CQL-style table the latest of the marker's and the values' expiries.
CREATE OR REPLACE FUNCTION ttl._managed_expression(p ttl.policy) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN p.row_values_attnum IS NOT NULL
                THEN format('CASE WHEN %2$I IS NULL THEN %1$I ELSE ttl.latest_expiry(%1$I, %2$I) END',
                            ttl._attname(p.relid, p.row_expiry_attnum), ttl._attname(p.relid, p.row_values_attnum))
                ELSE format('%I', ttl._attname(p.relid, p.row_expiry_attnum)) END
$fn$;

-- A CQL-style table's values expire to NULL: a NOT NULL value column is refused.
CREATE OR REPLACE FUNCTION ttl._check_value_columns(p ttl.policy) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bad name;
BEGIN
    SELECT a.attname INTO bad FROM ttl._value_columns(p) c
      JOIN pg_attribute a ON a.attrelid = p.relid AND a.attnum = c
     WHERE a.attnotnull LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'column "%" of table % is NOT NULL: in a CQL-style table ("ttl_value_ttls") every value outside the primary key expires to NULL',
            bad, p.relid::regclass
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = format('ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL, or make it part of the primary key.',
                                p.relid::regclass, bad);
    END IF;
END
$fn$;

-- Whether going from old_p to new_p (either NULL: no policy) changes the
-- user's table: its added columns, their DEFAULTs and triggers, row security.
CREATE OR REPLACE FUNCTION ttl._changes_table(old_p ttl.policy, new_p ttl.policy) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (old_p.row_expiry_attnum IS NOT NULL OR coalesce(old_p.strict_visibility, false)
            OR new_p.row_expiry_attnum IS NOT NULL OR coalesce(new_p.strict_visibility, false)
            OR (new_p.relid IS NOT NULL AND ttl._enters_row_mode(new_p)))
       AND (old_p.relid IS NULL OR new_p.relid IS NULL
            OR (old_p.ttl_attnum, old_p.expiration_expression, old_p.expire_after, old_p.unit,
                old_p.row_expiry_attnum, old_p.strict_visibility, old_p.value_ttl_overrides_table_ttl,
                old_p.value_ttls, old_p.row_values_attnum)
               IS DISTINCT FROM
               (new_p.ttl_attnum, new_p.expiration_expression, new_p.expire_after, new_p.unit,
                new_p.row_expiry_attnum, new_p.strict_visibility, new_p.value_ttl_overrides_table_ttl,
                new_p.value_ttls, new_p.row_values_attnum))
$fn$;

-- Column policies: what relative_to resolves to (unset: the table's TTL base
-- when it has one, else the value's own write time).
CREATE OR REPLACE FUNCTION ttl._column_base(tbl oid, relative_to text) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    IF relative_to IS NOT NULL THEN
        RETURN relative_to;
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    RETURN CASE WHEN FOUND AND ttl._base_sql(p) IS NOT NULL THEN 'row' ELSE 'write' END;
END
$fn$;

-- A column policy as it will be stored: relative_to resolved, and for
-- 'write' the tracking column added (kept when it already exists).
CREATE OR REPLACE FUNCTION ttl._column_mode(old_c ttl.column_policy, new_c ttl.column_policy)
RETURNS ttl.column_policy
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := new_c.relid::regclass;
    col name;
BEGIN
    new_c.relative_to := ttl._column_base(new_c.relid, new_c.relative_to);
    IF new_c.relative_to = 'write' THEN
        IF old_c.track_attnum IS NOT NULL AND ttl._attname(new_c.relid, old_c.track_attnum) IS NOT NULL THEN
            new_c.track_attnum := old_c.track_attnum;
        ELSIF new_c.track_attnum IS NULL THEN
            PERFORM ttl._check_table(tbl);
            PERFORM ttl._attnum(tbl, ttl._attname(new_c.relid, new_c.attnum), 'column');
            col := ttl._added_column_name(tbl, 'ttl_cell_' || ttl._attname(new_c.relid, new_c.attnum));
            -- The missing value for existing rows: tracked from now.
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I tstzrange DEFAULT pg_catalog.tstzrange(pg_catalog.now(), %s, %L)',
                           tbl, col, ttl._expiry_default_sql(new_c.expire_after, true), '[)');
            new_c.track_attnum := ttl._attnum(tbl, col, 'column');
        END IF;
    ELSE
        new_c.track_attnum := NULL;
    END IF;
    RETURN new_c;
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
                       ttl._attname(tbl, p.row_expiry_attnum), ttl._marker_default(p));
    END IF;
    -- CQL-style: UPDATE leaves the row's expiry alone; each value has its trigger.
    PERFORM ttl._value_triggers_sync(tbl);
    -- Partitioned: each partition's latest write and expiry (sql/73_value_ttls.sql).
    PERFORM ttl._partition_tracking_sync(tbl);
    IF p.row_expiry_attnum IS NOT NULL AND NOT p.value_ttls THEN
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


-- The one way a table's policy changes (old_p or new_p NULL: it is created or
-- removed): the row as it will be stored, the catalog write (validated by its
-- trigger), then the user's table brought in step, only if what it carries
-- changes (ALTER TABLE locks it).
CREATE OR REPLACE FUNCTION ttl._apply_change(old_p ttl.policy, new_p ttl.policy) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl oid := coalesce(new_p.relid, old_p.relid);
BEGIN
    IF new_p.relid IS NOT NULL THEN
        new_p := ttl._row_mode(old_p, new_p);
    END IF;
    -- Tells the catalog's validation that this write comes with its table change.
    PERFORM set_config('ttl.applying_change', tbl::text, true);
    IF new_p.relid IS NULL THEN
        DELETE FROM ttl.policy WHERE relid = tbl;
    ELSIF old_p.relid IS NULL THEN
        INSERT INTO ttl.policy SELECT new_p.*;
    ELSE
        -- Every column of the row, whatever options exist.
        EXECUTE format('UPDATE ttl.policy SET (%1$s) = (SELECT %1$s FROM (SELECT ($1).*) AS n) WHERE relid = $2',
                       (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                          FROM pg_attribute a
                         WHERE a.attrelid = 'ttl.policy'::regclass AND a.attnum > 0 AND NOT a.attisdropped
                           AND a.attname <> 'relid'))
            USING new_p, tbl;
    END IF;
    PERFORM set_config('ttl.applying_change', '', true);

    IF ttl._changes_table(old_p, new_p) THEN
        IF new_p.relid IS NULL THEN
            PERFORM ttl._strict_sync(tbl);  -- strict objects first: they may read the columns about to go
        END IF;
        IF old_p.row_expiry_attnum IS NOT NULL AND (new_p.relid IS NULL OR new_p.row_expiry_attnum IS NULL) THEN
            IF coalesce(old_p.queue_shards, 0) > 0 THEN
                PERFORM ttl._queue_sync(tbl);  -- the queue's triggers read the columns about to go
            END IF;
            PERFORM ttl._sync_table(tbl);
            PERFORM ttl._drop_added_column(tbl, old_p.row_expiry_attnum);
            PERFORM ttl._drop_added_column(tbl, old_p.row_write_attnum);
        END IF;
        PERFORM ttl._sync_table(tbl);
        IF old_p.row_values_attnum IS NOT NULL AND new_p.row_values_attnum IS DISTINCT FROM old_p.row_values_attnum THEN
            PERFORM ttl._drop_added_column(tbl, old_p.row_values_attnum);
        END IF;
    END IF;
    IF new_p.relid IS NULL THEN
        DELETE FROM ttl.tier WHERE relid = tbl;  -- tiers extend the policy (sql/82_tiers.sql)
    END IF;
    -- The expiration queue follows the policy (sql/78_queues.sql).
    IF coalesce(old_p.queue_shards, 0) > 0 OR coalesce(new_p.queue_shards, 0) > 0 THEN
        PERFORM ttl._queue_sync(tbl);
    END IF;
    -- Wake up workers (they also poll).
    PERFORM pg_notify('pg_ttl', tbl::regclass::text);
END
$fn$;

-- The same for a column policy.
CREATE OR REPLACE FUNCTION ttl._apply_column_change(old_c ttl.column_policy, new_c ttl.column_policy) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl oid := coalesce(new_c.relid, old_c.relid);
    n smallint := coalesce(new_c.attnum, old_c.attnum);
BEGIN
    IF new_c.relid IS NOT NULL THEN
        new_c := ttl._column_mode(old_c, new_c);
    END IF;
    PERFORM set_config('ttl.applying_change', tbl::text, true);
    IF new_c.relid IS NULL THEN
        DELETE FROM ttl.column_policy WHERE relid = tbl AND attnum = n;
    ELSIF old_c.relid IS NULL THEN
        INSERT INTO ttl.column_policy SELECT new_c.*;
    ELSE
        UPDATE ttl.column_policy SET expire_after = new_c.expire_after, relative_to = new_c.relative_to,
                                     track_attnum = new_c.track_attnum
         WHERE relid = tbl AND attnum = n;
    END IF;
    PERFORM set_config('ttl.applying_change', '', true);

    PERFORM ttl._sync_table(tbl);
    IF old_c.track_attnum IS NOT NULL AND (new_c.relid IS NULL OR new_c.track_attnum IS DISTINCT FROM old_c.track_attnum) THEN
        PERFORM ttl._drop_added_column(tbl, old_c.track_attnum);
    END IF;
    PERFORM pg_notify('pg_ttl', tbl::regclass::text);
END
$fn$;

-- Set a column's TTL (relative_to NULL: keep the current base, or pick the
-- default for a new one).
CREATE OR REPLACE FUNCTION ttl._set_column_policy(tbl regclass, column_name name, expire_after interval,
                                                  relative_to text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    old_c ttl.column_policy;
    new_c ttl.column_policy;
BEGIN
    PERFORM ttl._check_table(tbl);
    new_c.relid := tbl;
    new_c.attnum := ttl._attnum(tbl, column_name, 'column');
    SELECT * INTO old_c FROM ttl.column_policy c WHERE c.relid = tbl AND c.attnum = new_c.attnum FOR UPDATE;
    IF FOUND THEN
        new_c := old_c;
    ELSE
        new_c.atttypid := 0;
        new_c.created_at := now();
        new_c.updated_at := now();
    END IF;
    new_c.expire_after := expire_after;
    IF relative_to IS NOT NULL THEN
        new_c.relative_to := lower(btrim(relative_to));
        IF new_c.relative_to IS DISTINCT FROM old_c.relative_to THEN
            new_c.track_attnum := NULL;
        END IF;
    END IF;
    PERFORM ttl._apply_column_change(old_c, new_c);
END
$fn$;

-- Column TTL with an explicit base: 'row' (the table's TTL column, or the
-- write time of a per-row TTL table) or 'write' (the value's own write time).
CREATE OR REPLACE FUNCTION ttl.enable_column(tbl regclass, column_name name, expire_after interval,
                                             relative_to text) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT ttl._set_column_policy(tbl, column_name, expire_after, relative_to)
$fn$;

-- A write to the catalog that would need the user's table to change (the
-- columns of per-row TTL or value TTL counted from writes, strict
-- visibility's row security and view) is made by the SQL API, which changes
-- both (sql/71_table_changes.sql); written directly, it is refused rather than
-- leaving the table out of step. Everything else may be written directly.
CREATE OR REPLACE FUNCTION ttl._refuse_direct_table_change(tbl oid, changes_table boolean) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF changes_table AND current_setting('ttl.applying_change', true) IS DISTINCT FROM tbl::text
       AND EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION 'this TTL change of table % also changes the table (per-row TTL columns, value TTL counted from writes, or strict visibility)',
            tbl::regclass
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Make it with the SQL API (ttl.set_options, ttl.reset_options, ttl.disable, ttl.enable_column, ttl.disable_column) or TTL DDL, not by writing ttl.policy or ttl.column_policy.';
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION ttl._validate_policy_delete() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM ttl._refuse_direct_table_change(OLD.relid, ttl._changes_table(OLD, NULL));
    RETURN OLD;
END
$fn$;

DROP TRIGGER IF EXISTS validate_delete ON ttl.policy;
CREATE TRIGGER validate_delete BEFORE DELETE ON ttl.policy
    FOR EACH ROW EXECUTE FUNCTION ttl._validate_policy_delete();

CREATE OR REPLACE FUNCTION ttl._validate_column_policy_delete() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM ttl._refuse_direct_table_change(OLD.relid,
        OLD.relative_to = 'write'
        OR coalesce((SELECT p.strict_visibility FROM ttl.policy p WHERE p.relid = OLD.relid), false));
    RETURN OLD;
END
$fn$;

DROP TRIGGER IF EXISTS validate_delete ON ttl.column_policy;
CREATE TRIGGER validate_delete BEFORE DELETE ON ttl.column_policy
    FOR EACH ROW EXECUTE FUNCTION ttl._validate_column_policy_delete();
