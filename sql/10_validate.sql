-- Validation shared by every entry point: the SQL API, TTL DDL, and direct
-- writes to ttl.policy (a trigger runs it). Errors name the table, column or
-- option and say what would be accepted.

-- Types a TTL column may have; numeric ones hold Unix time and need ttl_unit.
CREATE OR REPLACE FUNCTION ttl._type_kind(typ oid) RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE typ
        WHEN 'pg_catalog.date'::regtype THEN 'time'
        WHEN 'pg_catalog.timestamp'::regtype THEN 'time'
        WHEN 'pg_catalog.timestamptz'::regtype THEN 'time'
        WHEN 'pg_catalog.int4'::regtype THEN 'number'
        WHEN 'pg_catalog.int8'::regtype THEN 'number'
        WHEN 'pg_catalog.numeric'::regtype THEN 'number'
    END
$fn$;

CREATE OR REPLACE FUNCTION ttl._check_owner(tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

CREATE OR REPLACE FUNCTION ttl._check_table(tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
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
$fn$;

-- attnum of a live column, or a clear error (naming the option it was given for, if any).
CREATE OR REPLACE FUNCTION ttl._attnum(tbl regclass, column_name text, option text) RETURNS smallint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n smallint;
BEGIN
    SELECT attnum INTO n FROM pg_attribute
     WHERE attrelid = tbl AND attname = column_name AND attnum > 0 AND NOT attisdropped;
    IF n IS NULL THEN
        RAISE EXCEPTION 'column "%" of table % does not exist%', column_name, tbl,
                        coalesce(' (' || ttl._option_label(option) || ')', '')
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN n;
END
$fn$;

-- The small lookups a pass makes again and again (this one, ttl._qualified,
-- ttl._table_search_path) are PL/pgSQL: a session plans their query once. As SQL
-- functions (never inlined: their search_path is pinned) every call parsed and
-- planned it again, 50-110 us a call against 30-40 us.
CREATE OR REPLACE FUNCTION ttl._attname(tbl oid, n smallint) RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN (SELECT attname FROM pg_attribute WHERE attrelid = tbl AND attnum = n AND NOT attisdropped);
END
$fn$;

-- A relation's name as SQL text, always schema-qualified and quoted where needed
-- (regclass::text leaves out a schema on the search_path); NULL when it is gone.
CREATE OR REPLACE FUNCTION ttl._qualified(rel oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RETURN (SELECT format('%I.%I', n.nspname, c.relname)
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel);
END
$fn$;

-- An expiration expression must be one expression over the table's own
-- columns, of type timestamptz, without subqueries, aggregates, window or
-- set-returning functions, and without volatile functions or operators (its
-- value must not change between the engine's select and its delete).
--
-- It is only parsed, never run nor planned (planning folds immutable calls on
-- constants, i.e. runs them): the server's parser turns it into a temporary
-- view, and the type, flags and functions are read from the parse tree. So
-- checking an expression runs none of its code, whoever checks it (the event
-- trigger after ALTER TABLE included). Names resolve with pg_catalog first, then
-- the table's schema, as everywhere an expression is evaluated.
CREATE OR REPLACE FUNCTION ttl._expression_error(tbl regclass, expr text) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    typ regtype;
    tree text;
    bad text;
BEGIN
    IF expr IS NULL OR btrim(expr) = '' THEN
        RETURN 'must not be empty';
    END IF;
    IF position(';' IN expr) > 0 THEN
        RETURN 'must be a single expression (no ";")';
    END IF;
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    BEGIN
        EXECUTE format('CREATE TEMPORARY VIEW ttl_expression_check AS SELECT (%s) AS expiry FROM ONLY %s',
                       expr, tbl);
        SELECT a.atttypid::regtype, r.ev_action::text INTO typ, tree
          FROM pg_class c
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = 1
          JOIN pg_rewrite r ON r.ev_class = c.oid
         WHERE c.oid = 'pg_temp.ttl_expression_check'::regclass;
        DROP VIEW pg_temp.ttl_expression_check;
    EXCEPTION WHEN OTHERS THEN
        RETURN format('is not a valid expression over the table''s columns: %s', SQLERRM);
    END;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    -- 'x) AS expiry FROM ONLY t UNION ALL SELECT (y' closes the check's own SELECT
    -- and makes a valid view: more than one expression, which the engine cannot use.
    IF tree ~ ':setOperations \{' THEN
        RETURN 'must be a single expression';
    END IF;
    IF tree ~ ':(hasAggs|hasWindowFuncs|hasTargetSRFs|hasSubLinks) true' THEN
        RETURN 'must not contain subqueries, aggregates, window or set-returning functions';
    END IF;
    -- Every function called, directly or through an operator.
    SELECT string_agg(DISTINCT p.oid::regprocedure::text, ', ') INTO bad
      FROM (SELECT m[2]::oid AS fn FROM regexp_matches(tree, ':(funcid|opfuncid) (\d+)', 'g') AS m
            UNION
            SELECT o.oprcode::oid FROM regexp_matches(tree, ':opno (\d+)', 'g') AS m
              JOIN pg_operator o ON o.oid = m[1]::oid) f
      JOIN pg_proc p ON p.oid = f.fn
     WHERE p.provolatile = 'v';
    IF bad IS NOT NULL THEN
        RETURN format('must not call volatile functions (%s): a row''s expiry must not change between two reads', bad);
    END IF;
    IF typ IS DISTINCT FROM 'timestamptz'::regtype THEN
        RETURN format('must be of type timestamp with time zone, not %s', typ);
    END IF;
    RETURN NULL;
END
$fn$;

-- A column that holds a time: date, timestamp (read as UTC) or timestamptz, or
-- a number of Unix time with its unit (a TTL column, an orphan policy's age
-- column). Returns its type; errors name the options that set it.
CREATE OR REPLACE FUNCTION ttl._check_time_column(tbl oid, n smallint, unit text, what text, col_option text,
                                                  unit_option text, other_choice text DEFAULT '') RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    typ oid;
    kind text;
BEGIN
    SELECT atttypid INTO typ FROM pg_attribute WHERE attrelid = tbl AND attnum = n AND NOT attisdropped;
    IF typ IS NULL THEN
        RAISE EXCEPTION 'table %: the column of % (attnum %) does not exist', tbl::regclass, ttl._option_label(col_option), n
            USING ERRCODE = 'undefined_column';
    END IF;
    kind := ttl._type_kind(typ);
    IF kind IS NULL THEN
        RAISE EXCEPTION 'column "%" of table % has type %, which cannot be %', ttl._attname(tbl, n), tbl::regclass,
            typ::regtype, what
            USING ERRCODE = 'datatype_mismatch',
                  HINT = format('Use a date, timestamp or timestamptz column, an integer, bigint or numeric column holding Unix time with %s%s.',
                                ttl._option_label(unit_option), other_choice);
    END IF;
    IF kind = 'number' AND unit IS NULL THEN
        RAISE EXCEPTION 'column "%" of table % is %: % must be set', ttl._attname(tbl, n), tbl::regclass, typ::regtype,
            ttl._option_label(unit_option)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = format('Set %s to seconds, milliseconds, microseconds or nanoseconds (the Unix time unit the column holds).',
                                ttl._option_label(unit_option));
    END IF;
    IF kind = 'time' AND unit IS NOT NULL THEN
        RAISE EXCEPTION 'column "%" of table % is %: % applies to numeric columns only', ttl._attname(tbl, n),
            tbl::regclass, typ::regtype, ttl._option_label(unit_option)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF unit IS NOT NULL AND unit NOT IN ('seconds', 'milliseconds', 'microseconds', 'nanoseconds') THEN
        RAISE EXCEPTION 'table %: value of % must be seconds, milliseconds, microseconds or nanoseconds, got "%"',
            tbl::regclass, ttl._option_label(unit_option), unit USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN typ;
END
$fn$;

-- The whole-row check run before any write to ttl.policy.
CREATE OR REPLACE FUNCTION ttl._validate_policy() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := NEW.relid::regclass;
    err text;
    o record;
    n bigint;
BEGIN
    -- Options left NULL (a direct INSERT naming only some) take their defaults.
    NEW := ttl._fill_defaults(NEW);
    IF TG_OP = 'UPDATE' AND NEW.relid <> OLD.relid THEN
        RAISE EXCEPTION 'the table of a TTL policy cannot be changed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl._check_table(tbl);
    PERFORM ttl._refuse_direct_table_change(NEW.relid, ttl._changes_table(OLD, NEW));

    IF NEW.ttl_attnum IS NOT NULL AND NEW.expiration_expression IS NOT NULL THEN
        RAISE EXCEPTION 'table %: set either "ttl_column" or "ttl_expiration_expression", not both', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Reset one of them first, e.g. SELECT ttl.reset_option(''' || tbl || ''', ''column'').';
    END IF;
    IF NEW.expire_after IS NULL AND NEW.expiration_expression IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_expire_after" and/or "ttl_expiration_expression" must be set', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.expire_after < interval '0' THEN
        RAISE EXCEPTION 'table %: value of "ttl_expire_after" must not be negative, got %', tbl, NEW.expire_after
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Zero (YDB's PT0S): a row expires at its column's own time (an expire_at column).
    IF NEW.expire_after = interval '0' AND NEW.ttl_attnum IS NULL AND NOT NEW.value_ttls THEN
        RAISE EXCEPTION 'table %: value of "ttl_expire_after" must be greater than zero without "ttl_column", got %',
            tbl, NEW.expire_after
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Zero means "expire at the column''s own time": it needs "ttl_column" (or, for a CQL-style table with "ttl_value_ttls", "no default TTL").';
    END IF;
    IF NEW.value_ttls AND NEW.row_expiry_attnum IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_value_ttls" needs a per-row TTL: "ttl_expire_after" without "ttl_column" or "ttl_expiration_expression"', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Reset the column or expression first; "ttl_expire_after" is then the default TTL of writes without USING TTL (0: none).';
    END IF;
    IF NEW.ignore_value_ttl AND NEW.row_expiry_attnum IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_ignore_value_ttl" applies to per-row TTL tables only ("ttl_expire_after" without "ttl_column")', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A table whose TTL counts from a column of its own drops a partition by that column''s bound.';
    END IF;
    -- Where they would do nothing, they are refused rather than stored without effect.
    IF NEW.value_ttl_overrides_table_ttl AND NEW.row_expiry_attnum IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_value_ttl_overrides_table_ttl" applies to per-row TTL tables only ("ttl_expire_after" without "ttl_column"): a row''s own TTL is what it replaces the table TTL with', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A table whose TTL counts from a column of its own has no per-write TTL to prefer.';
    END IF;
    IF NEW.ignore_value_ttl AND (SELECT relkind FROM pg_class WHERE oid = NEW.relid) <> 'p' THEN
        RAISE EXCEPTION 'table %: "ttl_ignore_value_ttl" decides when a partition is dropped, and % is not partitioned', tbl, tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.value_ttl_overrides_table_ttl AND NEW.value_ttls AND (SELECT relkind FROM pg_class WHERE oid = NEW.relid) <> 'p' THEN
        RAISE EXCEPTION 'table %: in a CQL-style table a write''s own TTL always replaces the default; "ttl_value_ttl_overrides_table_ttl" only decides when a partition is dropped, and % is not partitioned', tbl, tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.ignore_value_ttl AND NEW.value_ttl_overrides_table_ttl THEN
        RAISE EXCEPTION 'table %: set "ttl_ignore_value_ttl" (partitions expire by the table TTL alone) or "ttl_value_ttl_overrides_table_ttl" (by the rows'' own TTLs alone), not both', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.expire_after IS NOT NULL THEN
        -- Every run computes now() - expire_after: it must stay a representable time.
        BEGIN
            PERFORM now() - NEW.expire_after, now() + NEW.expire_after;
        EXCEPTION WHEN datetime_field_overflow THEN
            RAISE EXCEPTION 'table %: value of "ttl_expire_after" is too large, got %', tbl, NEW.expire_after
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Expiry must stay within the timestamp range (4713 BC to 294276 AD) counted from now.';
        END;
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
        NEW.ttl_atttypid := ttl._check_time_column(NEW.relid, NEW.ttl_attnum, NEW.unit, 'a TTL column', 'column', 'unit',
                                                   ', or "ttl_expiration_expression"');
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

    FOR o IN SELECT * FROM ttl.options x WHERE x.kind IN ('batch', 'rate') ORDER BY x.position LOOP
        n := (to_jsonb(NEW) ->> o.policy_column)::bigint;
        IF o.kind = 'batch' AND n < 1 THEN
            RAISE EXCEPTION 'table %: value of % must be at least 1, got %', tbl, ttl._option_label(o.name), n
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF o.kind = 'rate' AND n < 0 THEN
            RAISE EXCEPTION 'table %: value of % must be at least 1 (or 0 for unlimited), got %',
                tbl, ttl._option_label(o.name), n USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM ttl.tier t WHERE t.relid = NEW.relid) THEN
        IF NEW.ttl_attnum IS NULL THEN
            RAISE EXCEPTION 'table %: its tiers count from the TTL column; remove them first (ttl.set_tiers(%, ''[]''))',
                tbl, quote_literal(tbl::text) USING ERRCODE = 'dependent_objects_still_exist';
        END IF;
        PERFORM ttl._check_tiers(NEW.relid, NEW.expire_after);
    END IF;
    IF NEW.queue_shards < 0 OR NEW.queue_shards > 1024 THEN
        RAISE EXCEPTION 'table %: value of "ttl_queue_shards" must be between 0 (no queue) and 1024, got %', tbl,
            NEW.queue_shards USING ERRCODE = 'invalid_parameter_value',
            HINT = 'One shard per worker that should drain the table in parallel is enough; 4 to 16 is typical.';
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
    -- Detached partitions are the application's data: never into a schema PostgreSQL
    -- refuses them (its own) or pg_ttl's, which uninstall drops with everything in it.
    IF NEW.detach_schema IN ('pg_catalog', 'pg_toast', 'information_schema', 'ttl')
       OR NEW.detach_schema LIKE 'pg\_temp\_%' OR NEW.detach_schema LIKE 'pg\_toast\_temp\_%' THEN
        RAISE EXCEPTION 'table %: "ttl_detach_schema" cannot be schema "%": detached partitions go to a schema of yours',
            tbl, NEW.detach_schema
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'CREATE SCHEMA archive, and name it.';
    END IF;
    -- The table's owner moves its partitions there (the engine acts as the owner); checked
    -- as it is named (a privilege revoked later: the engine keeps the partitions attached).
    IF NEW.detach_schema IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.detach_schema IS DISTINCT FROM NEW.detach_schema)
       AND NOT has_schema_privilege((SELECT relowner FROM pg_class WHERE oid = NEW.relid),
                                    (SELECT oid FROM pg_namespace WHERE nspname = NEW.detach_schema), 'CREATE') THEN
        RAISE EXCEPTION 'table %: its owner % may not create tables in schema "%" ("ttl_detach_schema")',
            tbl, pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = NEW.relid)), NEW.detach_schema
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('GRANT CREATE ON SCHEMA %I TO %I', NEW.detach_schema,
                                pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = NEW.relid)));
    END IF;

    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$fn$;

DROP TRIGGER IF EXISTS validate ON ttl.policy;
CREATE TRIGGER validate BEFORE INSERT OR UPDATE ON ttl.policy
    FOR EACH ROW EXECUTE FUNCTION ttl._validate_policy();

CREATE OR REPLACE FUNCTION ttl._validate_column_policy() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := NEW.relid::regclass;
    a record;
    p ttl.policy;
BEGIN
    PERFORM ttl._check_table(tbl);
    NEW.relative_to := ttl._column_base(NEW.relid, NEW.relative_to);
    IF NEW.relative_to NOT IN ('row', 'write') THEN
        RAISE EXCEPTION 'column TTL of table %: relative_to must be row or write, got "%"', tbl, NEW.relative_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = NEW.relid;
    IF p.value_ttls THEN
        RAISE EXCEPTION 'table % is CQL-style ("ttl_value_ttls"): every value has its own TTL already', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Write the value with its TTL (UPDATE ... USING TTL n SET column = ...).';
    END IF;
    IF NEW.relative_to = 'row' AND (p.relid IS NULL OR ttl._base_sql(p) IS NULL) THEN
        RAISE EXCEPTION 'column TTL of table %: relative_to = row needs a table TTL with "ttl_column" or per-row TTL', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use relative_to => ''write'' (from the value''s own write time).';
    END IF;
    -- Counted from writes, the value needs its tracking column; the strict view shows every value.
    PERFORM ttl._refuse_direct_table_change(NEW.relid,
        NEW.relative_to = 'write' OR coalesce(p.strict_visibility, false)
        OR (TG_OP = 'UPDATE' AND OLD.relative_to = 'write'));
    IF NEW.relative_to = 'write' AND NEW.track_attnum IS NULL THEN
        RAISE EXCEPTION 'column TTL of table %: a value counted from its writes needs its tracking column', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
$fn$;

DROP TRIGGER IF EXISTS validate ON ttl.column_policy;
CREATE TRIGGER validate BEFORE INSERT OR UPDATE ON ttl.column_policy
    FOR EACH ROW EXECUTE FUNCTION ttl._validate_column_policy();
