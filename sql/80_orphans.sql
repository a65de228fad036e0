-- Orphans: rows of a child table whose key has no row in a parent table (no
-- foreign key: logs, caches, blobs keyed by hash, partitioned tables). The
-- engine deletes them range by range with the anti-join re-checked in every
-- DELETE, so a parent committed meanwhile keeps its child, and never a row
-- younger than min_age (by its age column), so a child written a little before
-- its parent stays.
--
-- An age column is required: without one, a child whose parent is about to be
-- written cannot be told from an orphan.

-- attnums of the named columns of tbl (errors name the option).
CREATE OR REPLACE FUNCTION ttl._attnums(tbl regclass, cols text[], option text) RETURNS smallint[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    result smallint[] := '{}';
    c text;
BEGIN
    IF cols IS NULL OR cardinality(cols) = 0 THEN
        RAISE EXCEPTION 'value of % must name at least one column', ttl._option_label(option)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH c IN ARRAY cols LOOP
        result := result || ttl._attnum(tbl, btrim(c), option);
    END LOOP;
    RETURN result;
END
$fn$;

-- The parent's unique btree index whose key columns are exactly `attnums`
-- (any order), the one the anti-join probes; NULL if there is none.
CREATE OR REPLACE FUNCTION ttl._orphan_index(parent oid, attnums smallint[]) RETURNS oid
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT i.indexrelid
      FROM pg_index i
      JOIN pg_class ic ON ic.oid = i.indexrelid
      JOIN pg_am am ON am.oid = ic.relam
     WHERE i.indrelid = parent AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
       AND i.indexprs IS NULL AND am.amname = 'btree' AND i.indnkeyatts = cardinality(attnums)
       AND (SELECT array_agg(k ORDER BY k) FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS u(k, n)
             WHERE u.n <= i.indnkeyatts)
           = (SELECT array_agg(a ORDER BY a) FROM unnest(attnums) AS a)
     ORDER BY i.indisprimary DESC, i.indexrelid
     LIMIT 1
$fn$;

CREATE OR REPLACE FUNCTION ttl._validate_orphan_policy() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := NEW.relid::regclass;
    parent regclass;
    i integer;
    child_type oid;
    parent_type oid;
    err text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.relid <> OLD.relid THEN
        RAISE EXCEPTION 'the table of an orphan policy cannot be changed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl._check_table(tbl);
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = NEW.parent_relid AND relkind IN ('r', 'p')) THEN
        RAISE EXCEPTION 'table %: the parent of "ttl_orphan_of" (oid %) is not a table', tbl, NEW.parent_relid
            USING ERRCODE = 'wrong_object_type';
    END IF;
    parent := NEW.parent_relid::regclass;
    IF cardinality(NEW.key_attnums) IS DISTINCT FROM cardinality(NEW.parent_attnums) THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_key" has % columns and the parent key of "ttl_orphan_of" %', tbl,
            cardinality(NEW.key_attnums), cardinality(NEW.parent_attnums) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. cardinality(NEW.key_attnums) LOOP
        SELECT atttypid INTO child_type FROM pg_attribute
         WHERE attrelid = NEW.relid AND attnum = NEW.key_attnums[i] AND NOT attisdropped;
        SELECT atttypid INTO parent_type FROM pg_attribute
         WHERE attrelid = NEW.parent_relid AND attnum = NEW.parent_attnums[i] AND NOT attisdropped;
        IF child_type IS NULL OR parent_type IS NULL THEN
            RAISE EXCEPTION 'table %: a key column of the orphan policy no longer exists', tbl
                USING ERRCODE = 'undefined_column';
        END IF;
        IF child_type <> parent_type THEN
            RAISE EXCEPTION 'table %: key column "%" is %, but "%" of % is %', tbl,
                ttl._attname(NEW.relid, NEW.key_attnums[i]), child_type::regtype,
                ttl._attname(NEW.parent_relid, NEW.parent_attnums[i]), parent, parent_type::regtype
                USING ERRCODE = 'datatype_mismatch',
                      HINT = 'The child''s key and the parent''s must have the same types, column for column.';
        END IF;
    END LOOP;
    IF ttl._orphan_index(NEW.parent_relid, NEW.parent_attnums) IS NULL THEN
        RAISE EXCEPTION 'table % has no unique index on (%): looking up a parent would read the whole table',
            parent, (SELECT string_agg(quote_ident(ttl._attname(NEW.parent_relid, a)), ', ')
                       FROM unnest(NEW.parent_attnums) AS a)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = format('Create one: CREATE UNIQUE INDEX ON %s (%s);', parent,
                                (SELECT string_agg(quote_ident(ttl._attname(NEW.parent_relid, a)), ', ')
                                   FROM unnest(NEW.parent_attnums) AS a));
    END IF;
    IF NOT has_table_privilege((SELECT relowner FROM pg_class WHERE oid = NEW.relid), NEW.parent_relid, 'SELECT') THEN
        RAISE EXCEPTION 'the owner of table % cannot read table %: the orphan check runs as that owner', tbl, parent
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('GRANT SELECT ON %s TO %s;', parent,
                                (SELECT relowner::regrole FROM pg_class WHERE oid = NEW.relid));
    END IF;

    IF NEW.min_age IS NULL OR NEW.min_age < interval '0' THEN
        RAISE EXCEPTION 'table %: value of "ttl_orphan_min_age" must not be negative, got %', tbl,
            coalesce(NEW.min_age::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    NEW.age_unit := lower(btrim(NEW.age_unit));
    PERFORM ttl._check_time_column(NEW.relid, NEW.age_attnum, NEW.age_unit, 'an age column', 'orphan_age_column',
                                   'orphan_age_unit');
    IF NEW.job_cron IS NOT NULL THEN
        err := ttl.cron_error(NEW.job_cron);
        IF err IS NOT NULL THEN
            RAISE EXCEPTION 'table %: invalid cron expression for "ttl_orphan_job_cron": %', tbl, err
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF NEW.range_bytes < 8192 THEN
        RAISE EXCEPTION 'table %: value of "ttl_orphan_range_bytes" must be at least 8192 (one page), got %', tbl,
            NEW.range_bytes USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.delete_batch_size < 1 THEN
        RAISE EXCEPTION 'table %: value of "ttl_orphan_delete_batch_size" must be at least 1, got %', tbl,
            NEW.delete_batch_size USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$fn$;

DROP TRIGGER IF EXISTS validate ON ttl.orphan_policy;
CREATE TRIGGER validate BEFORE INSERT OR UPDATE ON ttl.orphan_policy
    FOR EACH ROW EXECUTE FUNCTION ttl._validate_orphan_policy();

-- Delete `tbl`'s orphans: rows whose `key` has no row in `parent` (by
-- `parent_key`, same order; default: the same names), older than `min_age` by
-- `age_column`. Enabling again changes the policy.
CREATE OR REPLACE FUNCTION ttl.enable_orphans(
    tbl regclass,
    key text[],
    parent regclass,
    parent_key text[] DEFAULT NULL,
    min_age interval DEFAULT '1 hour',
    age_column name DEFAULT NULL,
    age_unit text DEFAULT NULL,
    job_cron text DEFAULT NULL,
    range_bytes bigint DEFAULT 67108864,
    delete_batch_size integer DEFAULT 1000
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    o ttl.orphan_policy;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF parent IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_of" must name the parent table', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF age_column IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_age_column" must be set', tbl
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Orphans are deleted only once older than min_age by a time column (a row''s creation time): without one, a child written just before its parent cannot be told from an orphan.';
    END IF;
    o.relid := tbl;
    o.key_attnums := ttl._attnums(tbl, key, 'orphan_key');
    o.parent_relid := parent;
    o.parent_attnums := ttl._attnums(parent, coalesce(parent_key, key), 'orphan_of');
    o.min_age := min_age;
    o.age_attnum := ttl._attnum(tbl, age_column, 'orphan_age_column');
    o.age_unit := age_unit;
    o.job_cron := nullif(btrim(job_cron), '');
    o.range_bytes := coalesce(range_bytes, 67108864);
    o.delete_batch_size := coalesce(delete_batch_size, 1000);
    o.created_at := now();
    o.updated_at := now();
    INSERT INTO ttl.orphan_policy SELECT o.*
    ON CONFLICT (relid) DO UPDATE
       SET (key_attnums, parent_relid, parent_attnums, min_age, age_attnum, age_unit, job_cron, range_bytes,
            delete_batch_size)
         = (EXCLUDED.key_attnums, EXCLUDED.parent_relid, EXCLUDED.parent_attnums, EXCLUDED.min_age,
            EXCLUDED.age_attnum, EXCLUDED.age_unit, EXCLUDED.job_cron, EXCLUDED.range_bytes,
            EXCLUDED.delete_batch_size);
    PERFORM pg_notify('pg_ttl', tbl::text);
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

CREATE OR REPLACE FUNCTION ttl.disable_orphans(tbl regclass) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
BEGIN
    PERFORM ttl._check_table(tbl);
    DELETE FROM ttl.orphan_policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no orphan policy', tbl USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM pg_notify('pg_ttl', tbl::text);
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

-- The orphans of `tbl` for a run started at `cutoff`, as SQL over the child's
-- columns: no parent row through the parent's unique index (compared with
-- that index's own equality operators), and older than min_age. The parent's
-- columns are renamed inside the lookup, so that the child's column names,
-- written unqualified, cannot resolve to the parent's. Raises when the policy
-- cannot be checked safely (parent or index gone).
CREATE OR REPLACE FUNCTION ttl.orphans_sql(tbl oid, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    o ttl.orphan_policy;
    idx oid;
    aliases text;
    conds text;
    nconds integer;
    age_typ regtype;
    age_term text;
    age_from interval;
    age_bound text;
    age_exact boolean;
    age_sql text;
BEGIN
    SELECT * INTO o FROM ttl.orphan_policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no orphan policy', tbl::regclass USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = o.parent_relid) THEN
        RAISE EXCEPTION 'the parent table of % (oid %) no longer exists', tbl::regclass, o.parent_relid
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    idx := ttl._orphan_index(o.parent_relid, o.parent_attnums);
    IF idx IS NULL THEN
        RAISE EXCEPTION 'table % has no valid unique index on the key of the orphan policy of %: nothing is deleted',
            o.parent_relid::regclass, tbl::regclass USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- Every live column of the parent renamed by position: "ttl parent 1", ...
    SELECT string_agg(format('%I', 'ttl parent ' || n), ', ' ORDER BY n) INTO aliases
      FROM (SELECT row_number() OVER (ORDER BY attnum) AS n FROM pg_attribute
             WHERE attrelid = o.parent_relid AND attnum > 0 AND NOT attisdropped) AS cols;
    SELECT string_agg(format('p.%I OPERATOR(%I.%s) %I',
                             'ttl parent ' || (SELECT count(*) FROM pg_attribute x
                                                WHERE x.attrelid = o.parent_relid AND x.attnum > 0
                                                  AND NOT x.attisdropped AND x.attnum <= k.pa),
                             opn.nspname, op.oprname, ttl._attname(o.relid, k.ca)), ' AND ' ORDER BY k.n),
           count(*)
      INTO conds, nconds
      FROM unnest(o.key_attnums, o.parent_attnums) WITH ORDINALITY AS k(ca, pa, n)
      JOIN pg_index i ON i.indexrelid = idx
      JOIN LATERAL (SELECT u.pos FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS u(att, pos)
                     WHERE u.att = k.pa) AS ip ON true
      JOIN pg_opclass oc ON oc.oid = (i.indclass::oid[])[ip.pos - 1 + array_lower(i.indclass::oid[], 1)]
      JOIN pg_attribute pa ON pa.attrelid = o.parent_relid AND pa.attnum = k.pa
      JOIN pg_amop am ON am.amopfamily = oc.opcfamily AND am.amoplefttype = pa.atttypid
                     AND am.amoprighttype = pa.atttypid AND am.amopstrategy = 3
      JOIN pg_operator op ON op.oid = am.amopopr
      JOIN pg_namespace opn ON opn.oid = op.oprnamespace;
    IF nconds <> cardinality(o.key_attnums) THEN
        RAISE EXCEPTION 'the key of the orphan policy of % has no equality operator in the parent''s index', tbl::regclass
            USING ERRCODE = 'undefined_object';
    END IF;
    age_typ := (SELECT atttypid FROM pg_attribute WHERE attrelid = o.relid AND attnum = o.age_attnum)::regtype;
    age_term := format('%I', ttl._attname(o.relid, o.age_attnum));
    -- A row dated D may have been written until the end of D: its age counts from D + 1.
    age_from := CASE WHEN age_typ = 'pg_catalog.date'::regtype THEN interval '1 day' ELSE interval '0' END;
    -- Old enough: the age column against a constant (one comparison per row, not the
    -- expiry arithmetic), with the exact expiry only where months make them differ.
    SELECT b.bound, b.exact INTO age_bound, age_exact
      FROM ttl._column_bound_sql(age_term, age_typ, o.age_unit, o.min_age + age_from, cutoff) b;
    IF age_exact AND age_bound IS NOT NULL THEN
        age_sql := age_bound;
    ELSE
        IF age_typ = 'pg_catalog.date'::regtype THEN
            age_term := format('(%s OPERATOR(pg_catalog.+) 1)', age_term);
        END IF;
        age_sql := format('(%s) OPERATOR(pg_catalog.<=) %L::timestamptz',
                          ttl._expiry_sql(age_typ, o.age_unit, o.min_age, age_term), cutoff);
        IF age_bound IS NOT NULL THEN
            age_sql := format('%s AND %s', age_bound, age_sql);
        END IF;
    END IF;
    -- OFFSET 0 keeps the lookup a probe per child row: pulled up into an anti-join, the
    -- planner may hash the whole parent for every range.
    RETURN format('(NOT EXISTS (SELECT 1 FROM %I.%I AS p(%s) WHERE %s OFFSET 0) AND %s)',
                  (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = o.parent_relid),
                  (SELECT c.relname FROM pg_class c WHERE c.oid = o.parent_relid),
                  aliases, conds, age_sql);
END
$fn$;

-- A table's orphan policy as (option, value) rows, named as in TTL DDL.
CREATE OR REPLACE FUNCTION ttl._orphan_values(tbl oid) RETURNS TABLE (option text, value text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT v.option, v.value
      FROM ttl.orphan_policy o,
           LATERAL (VALUES
               ('ttl_orphan_of', format('%s(%s)', o.parent_relid::regclass,
                   (SELECT string_agg(quote_ident(ttl._attname(o.parent_relid, a)), ', ' ORDER BY n)
                      FROM unnest(o.parent_attnums) WITH ORDINALITY AS u(a, n)))),
               ('ttl_orphan_key', (SELECT string_agg(quote_ident(ttl._attname(o.relid, a)), ', ' ORDER BY n)
                                     FROM unnest(o.key_attnums) WITH ORDINALITY AS u(a, n))),
               ('ttl_orphan_min_age', o.min_age::text),
               ('ttl_orphan_age_column', ttl._attname(o.relid, o.age_attnum)::text),
               ('ttl_orphan_age_unit', o.age_unit),
               ('ttl_orphan_job_cron', o.job_cron),
               ('ttl_orphan_range_bytes', o.range_bytes::text),
               ('ttl_orphan_delete_batch_size', o.delete_batch_size::text)) AS v(option, value)
     WHERE o.relid = tbl
$fn$;

-- TTL DDL's spelling (ALTER TABLE data SET (ttl_orphan_of = 'metadata(hash)',
-- ttl_orphan_key = 'hash', ttl_orphan_min_age = '1 hour',
-- ttl_orphan_age_column = 'created_at')): options as text, merged into the
-- table's orphan policy; NULL resets one. The parent key defaults to the
-- child's key names; an unqualified parent is looked up in the child's schema.
CREATE OR REPLACE FUNCTION ttl.set_orphan_options(tbl regclass, options jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    cur ttl.orphan_policy;
    kv record;
    v text;
    parent_text text;
    parent_cols text[];
    key_cols text[];
    min_age interval;
    age_column name;
    age_unit text;
    job_cron text;
    range_bytes bigint;
    dbs integer;
    m text[];
BEGIN
    PERFORM ttl._check_table(tbl);
    IF jsonb_typeof(options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object of option names and values' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO cur FROM ttl.orphan_policy WHERE relid = tbl;
    IF FOUND THEN
        parent_text := format('%I.%I', (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                         WHERE c.oid = cur.parent_relid),
                              (SELECT relname FROM pg_class WHERE oid = cur.parent_relid));
        parent_cols := ARRAY(SELECT ttl._attname(cur.parent_relid, a) FROM unnest(cur.parent_attnums) AS a);
        key_cols := ARRAY(SELECT ttl._attname(cur.relid, a) FROM unnest(cur.key_attnums) AS a);
        min_age := cur.min_age;
        age_column := ttl._attname(cur.relid, cur.age_attnum);
        age_unit := cur.age_unit;
        job_cron := cur.job_cron;
        range_bytes := cur.range_bytes;
        dbs := cur.delete_batch_size;
    END IF;
    FOR kv IN SELECT key, value FROM jsonb_each(options) LOOP
        v := CASE WHEN jsonb_typeof(kv.value) = 'null' THEN NULL ELSE kv.value #>> '{}' END;
        CASE ttl._option_key(kv.key)
            WHEN 'orphan_of' THEN
                m := regexp_match(coalesce(v, ''), '^\s*(.*?)\s*(?:\(\s*(.*?)\s*\))?\s*$');
                IF v IS NULL OR m[1] = '' THEN
                    RAISE EXCEPTION 'value of "ttl_orphan_of" must name the parent table, e.g. ''metadata(hash)'', got "%"',
                        coalesce(v, 'NULL') USING ERRCODE = 'invalid_parameter_value';
                END IF;
                parent_text := m[1];
                parent_cols := CASE WHEN m[2] IS NULL THEN NULL
                                    ELSE ARRAY(SELECT (parse_ident(btrim(c)))[1] FROM unnest(string_to_array(m[2], ',')) AS c)
                               END;
            WHEN 'orphan_key' THEN
                key_cols := ARRAY(SELECT (parse_ident(btrim(c)))[1] FROM unnest(string_to_array(v, ',')) AS c);
            WHEN 'orphan_min_age' THEN min_age := coalesce(ttl._to_interval('orphan_min_age', v), interval '1 hour');
            WHEN 'orphan_age_column' THEN age_column := v;
            WHEN 'orphan_age_unit' THEN age_unit := v;
            WHEN 'orphan_job_cron' THEN job_cron := v;
            WHEN 'orphan_range_bytes' THEN range_bytes := v::bigint;
            WHEN 'orphan_delete_batch_size' THEN dbs := ttl._to_int('orphan_delete_batch_size', v);
            ELSE
                RAISE EXCEPTION 'unknown orphan option %', ttl._option_label(kv.key)
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'Accepted: ttl_orphan_of, ttl_orphan_key, ttl_orphan_min_age, ttl_orphan_age_column, ttl_orphan_age_unit, ttl_orphan_job_cron, ttl_orphan_range_bytes, ttl_orphan_delete_batch_size.';
        END CASE;
    END LOOP;
    IF parent_text IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_of" must name the parent table', tbl USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- An unqualified parent is the child's schema's (this function's search_path is pinned).
    IF cardinality(parse_ident(parent_text)) = 1 THEN
        parent_text := format('%I.%I', (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                          WHERE c.oid = tbl), (parse_ident(parent_text))[1]);
    END IF;
    PERFORM ttl.enable_orphans(tbl, key_cols, parent_text::regclass, coalesce(parent_cols, key_cols),
                               coalesce(min_age, interval '1 hour'), age_column, age_unit, job_cron,
                               range_bytes, dbs);
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
