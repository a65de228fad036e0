-- Orphans: rows of a child table whose key has no row in a parent table (no
-- foreign key: logs, caches, blobs keyed by hash, partitioned tables). The
-- engine deletes them range by range with the anti-join re-checked in every
-- DELETE, so a parent committed meanwhile keeps its child, and never a row
-- younger than min_age (by its age column), so a child written a little before
-- its parent stays.
--
-- A child may have several parents: it is an orphan when none of them has its
-- key. Without an age column, a row's age is told by the transaction that wrote
-- it (its xmin) against the "xid clock" (ttl.xid_clock, below).

-- The xid clock of a child table without an age column: samples of (time, the
-- oldest transaction id still running then). A row whose xmin precedes a
-- sample's xid was written by a transaction that had ended by the sample's time,
-- so it is at least as old as the sample. The time is read after the snapshot
-- whose xmin it records, so it errs late: a row judged older than a sample
-- always is. Taken by every orphan run of the table (and when its policy is
-- set), at most one per 1/20 of its min_age (and per minute at most); samples
-- older than min_age plus a day go, but the newest of them. Written as the
-- table's owner (row security: only its owners write its samples; a forged one
-- could make young rows look old, and so only in their own table).
CREATE OR REPLACE FUNCTION ttl.xid_clock_tick(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    keep interval;
BEGIN
    SELECT o.min_age INTO keep FROM ttl.orphan_policy o WHERE o.relid = tbl AND o.age_attnum IS NULL;
    IF keep IS NULL THEN
        RETURN;  -- the policy reads an age column
    END IF;
    IF NOT EXISTS (SELECT 1 FROM ttl.xid_clock c
                    WHERE c.relid = tbl AND c.sampled_at > clock_timestamp() - least(interval '1 minute', keep / 20))
    THEN
        INSERT INTO ttl.xid_clock (relid, sampled_at, xid)
        SELECT tbl, clock_timestamp(), pg_snapshot_xmin(pg_current_snapshot())
        ON CONFLICT DO NOTHING;
    END IF;
    DELETE FROM ttl.xid_clock c
     WHERE c.relid = tbl
       AND c.sampled_at < (SELECT max(k.sampled_at) FROM ttl.xid_clock k
                            WHERE k.relid = tbl AND k.sampled_at < now() - keep - interval '1 day');
END
$fn$;

-- The xid a run at `cutoff` may delete `tbl`'s rows below (a policy without an
-- age column, whose min_age is `min_age`): the latest of the table's clock samples
-- taken at or before cutoff - min_age; NULL while there is none (nothing goes
-- yet), or when it is too far behind the current transaction id (2^30) to be
-- compared with 32-bit xmins.
CREATE OR REPLACE FUNCTION ttl._orphan_xid_horizon(tbl oid, min_age interval, cutoff timestamptz) RETURNS xid8
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT h.xid FROM (SELECT max(c.xid) AS xid FROM ttl.xid_clock c
                        WHERE c.relid = tbl AND c.sampled_at <= cutoff - min_age) h
     WHERE h.xid::text::numeric > pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1073741824
$fn$;

-- Why a run at `cutoff` deletes nothing of `tbl`'s orphans yet (NULL: it may):
-- a policy without an age column waits for a sample of the xid clock min_age old.
CREATE OR REPLACE FUNCTION ttl.orphans_waiting(tbl oid, cutoff timestamptz) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('no age column: orphans are deleted from %s on (min_age %s after the first pass that read '
                  'which transactions were running)',
                  to_char((coalesce((SELECT min(c.sampled_at) FROM ttl.xid_clock c WHERE c.relid = o.relid), cutoff) + o.min_age)
                          AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'), o.min_age)
      FROM ttl.orphan_policy o
     WHERE o.relid = tbl AND o.age_attnum IS NULL AND ttl._orphan_xid_horizon(o.relid, o.min_age, cutoff) IS NULL
$fn$;

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

-- ttl._orphan_parents (the parents of a policy, with their key columns) is in
-- sql/30_event_triggers.sql, before its first user.

CREATE OR REPLACE FUNCTION ttl._validate_orphan_policy() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    tbl regclass := NEW.relid::regclass;
    parent regclass;
    pk record;
    i integer;
    child_type oid;
    parent_type oid;
    err text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.relid <> OLD.relid THEN
        RAISE EXCEPTION 'the table of an orphan policy cannot be changed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM ttl._check_table(tbl);
    IF coalesce(cardinality(NEW.parent_relids), 0) = 0 THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_of" must name the parent table', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(NEW.parent_attnums) IS DISTINCT FROM cardinality(NEW.parent_relids) * cardinality(NEW.key_attnums)
    THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_key" has % columns, but the parent keys of "ttl_orphan_of" do not',
            tbl, cardinality(NEW.key_attnums) USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Each parent''s key has as many columns as the child''s, in the same order.';
    END IF;
    FOR pk IN SELECT * FROM ttl._orphan_parents(NEW.parent_relids, NEW.parent_attnums, cardinality(NEW.key_attnums))
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = pk.parent AND relkind IN ('r', 'p')) THEN
            RAISE EXCEPTION 'table %: the parent of "ttl_orphan_of" (oid %) is not a table', tbl, pk.parent
                USING ERRCODE = 'wrong_object_type';
        END IF;
        parent := pk.parent::regclass;
        FOR i IN 1 .. cardinality(NEW.key_attnums) LOOP
            SELECT atttypid INTO child_type FROM pg_attribute
             WHERE attrelid = NEW.relid AND attnum = NEW.key_attnums[i] AND NOT attisdropped;
            SELECT atttypid INTO parent_type FROM pg_attribute
             WHERE attrelid = pk.parent AND attnum = pk.attnums[i] AND NOT attisdropped;
            IF child_type IS NULL OR parent_type IS NULL THEN
                RAISE EXCEPTION 'table %: a key column of the orphan policy no longer exists', tbl
                    USING ERRCODE = 'undefined_column';
            END IF;
            IF child_type <> parent_type THEN
                RAISE EXCEPTION 'table %: key column "%" is %, but "%" of % is %', tbl,
                    ttl._attname(NEW.relid, NEW.key_attnums[i]), child_type::regtype,
                    ttl._attname(pk.parent, pk.attnums[i]), parent, parent_type::regtype
                    USING ERRCODE = 'datatype_mismatch',
                          HINT = 'The child''s key and the parent''s must have the same types, column for column.';
            END IF;
        END LOOP;
        IF ttl._orphan_index(pk.parent, pk.attnums) IS NULL THEN
            RAISE EXCEPTION 'table % has no unique index on (%): looking up a parent would read the whole table',
                parent, (SELECT string_agg(quote_ident(ttl._attname(pk.parent, a)), ', ') FROM unnest(pk.attnums) AS a)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = format('Create one: CREATE UNIQUE INDEX ON %s (%s);', parent,
                                    (SELECT string_agg(quote_ident(ttl._attname(pk.parent, a)), ', ')
                                       FROM unnest(pk.attnums) AS a));
        END IF;
        IF NOT has_table_privilege((SELECT relowner FROM pg_class WHERE oid = NEW.relid), pk.parent, 'SELECT') THEN
            RAISE EXCEPTION 'the owner of table % cannot read table %: the orphan check runs as that owner', tbl, parent
                USING ERRCODE = 'insufficient_privilege',
                      HINT = format('GRANT SELECT ON %s TO %s;', parent,
                                    (SELECT relowner::regrole FROM pg_class WHERE oid = NEW.relid));
        END IF;
    END LOOP;

    IF NEW.min_age IS NULL OR NEW.min_age < interval '0' THEN
        RAISE EXCEPTION 'table %: value of "ttl_orphan_min_age" must not be negative, got %', tbl,
            coalesce(NEW.min_age::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    NEW.age_unit := lower(btrim(NEW.age_unit));
    IF NEW.age_attnum IS NOT NULL THEN
        PERFORM ttl._check_time_column(NEW.relid, NEW.age_attnum, NEW.age_unit, 'an age column', 'orphan_age_column',
                                       'orphan_age_unit');
    ELSIF NEW.age_unit IS NOT NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_age_unit" applies to an age column, and none is set', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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

-- Delete `tbl`'s orphans: rows whose `key` has no row in `parent` (or in any
-- of `parents`, several parent tables: '{metadata, archive}'), by `parent_key`,
-- same order (NULL: the same names as `key`; one list, the same for every
-- parent; or one row per parent, '{{id}, {hash}}'), older than `min_age` by
-- `age_column`. Enabling again changes the policy.
CREATE OR REPLACE FUNCTION ttl.enable_orphans(
    tbl regclass,
    key text[],
    parent regclass DEFAULT NULL,
    parent_key text[] DEFAULT NULL,
    min_age interval DEFAULT '1 hour',
    age_column name DEFAULT NULL,
    age_unit text DEFAULT NULL,
    job_cron text DEFAULT NULL,
    range_bytes bigint DEFAULT 67108864,
    delete_batch_size integer DEFAULT NULL,
    parents regclass[] DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    o ttl.orphan_policy;
    all_parents regclass[];
    k integer;
    cols text[];
BEGIN
    PERFORM ttl._check_table(tbl);
    IF parent IS NOT NULL AND parents IS NOT NULL THEN
        RAISE EXCEPTION 'table %: give the parent table (parent) or the parent tables (parents), not both', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    all_parents := coalesce(parents, ARRAY[parent]);
    IF coalesce(cardinality(all_parents), 0) = 0 OR array_position(all_parents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_of" must name the parent table', tbl
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_ndims(parent_key) = 2 AND array_length(parent_key, 1) <> cardinality(all_parents) THEN
        RAISE EXCEPTION 'table %: % parent tables but % lists of parent key columns', tbl, cardinality(all_parents),
            array_length(parent_key, 1) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    o.relid := tbl;
    o.key_attnums := ttl._attnums(tbl, key, 'orphan_key');
    o.parent_relids := all_parents::oid[];
    o.parent_attnums := '{}';
    FOR k IN 1 .. cardinality(all_parents) LOOP
        cols := CASE WHEN parent_key IS NULL THEN key
                     WHEN array_ndims(parent_key) = 2 THEN ARRAY(SELECT unnest(parent_key[k:k][:]))
                     ELSE parent_key END;
        IF cardinality(cols) <> cardinality(key) THEN
            RAISE EXCEPTION 'table %: "ttl_orphan_key" has % columns, but the key of parent % has %', tbl,
                cardinality(key), all_parents[k], cardinality(cols) USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Each parent''s key has as many columns as the child''s, in the same order.';
        END IF;
        o.parent_attnums := o.parent_attnums || ttl._attnums(all_parents[k], cols, 'orphan_of');
    END LOOP;
    o.min_age := min_age;
    o.age_attnum := CASE WHEN age_column IS NOT NULL THEN ttl._attnum(tbl, age_column, 'orphan_age_column') END;
    o.age_unit := age_unit;
    o.job_cron := nullif(btrim(job_cron), '');
    o.range_bytes := coalesce(range_bytes, 67108864);
    -- Each DELETE also stops at ~50 ms (the engine sizes it by time): the count only
    -- caps orphans dense enough to reach it sooner.
    o.delete_batch_size := coalesce(delete_batch_size, 10000);
    o.created_at := now();
    o.updated_at := now();
    INSERT INTO ttl.orphan_policy SELECT o.*
    ON CONFLICT (relid) DO UPDATE
       SET (key_attnums, parent_relids, parent_attnums, min_age, age_attnum, age_unit, job_cron, range_bytes,
            delete_batch_size)
         = (EXCLUDED.key_attnums, EXCLUDED.parent_relids, EXCLUDED.parent_attnums, EXCLUDED.min_age,
            EXCLUDED.age_attnum, EXCLUDED.age_unit, EXCLUDED.job_cron, EXCLUDED.range_bytes,
            EXCLUDED.delete_batch_size);
    -- Without an age column, the clock's first sample starts the wait of min_age.
    PERFORM ttl.xid_clock_tick(tbl);
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
    DELETE FROM ttl.xid_clock WHERE relid = tbl;
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
-- columns: no row in any of its parents, each looked up through its unique
-- index (compared with that index's own equality operators), and older than
-- min_age. The parent's
-- columns are renamed inside the lookup, so that the child's column names,
-- written unqualified, cannot resolve to the parent's. Raises when the policy
-- cannot be checked safely (parent or index gone).
CREATE OR REPLACE FUNCTION ttl.orphans_sql(tbl oid, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    o ttl.orphan_policy;
    pk record;
    lookups text;
    idx oid;
    parent_name text;
    aliases text;
    conds text;
    nconds integer;
    age ttl.policy;  -- the age column, as the TTL column of a column policy
    age_sql text;
    horizon xid8;
BEGIN
    SELECT * INTO o FROM ttl.orphan_policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no orphan policy', tbl::regclass USING ERRCODE = 'undefined_object';
    END IF;
    -- OFFSET 0 keeps each lookup a probe per child row: pulled up into an anti-join, the
    -- planner may hash the whole parent for every range.
    lookups := '';
    FOR pk IN SELECT * FROM ttl._orphan_parents(o.parent_relids, o.parent_attnums, cardinality(o.key_attnums)) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = pk.parent) THEN
            RAISE EXCEPTION 'the parent table of % (oid %) no longer exists', tbl::regclass, pk.parent
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        idx := ttl._orphan_index(pk.parent, pk.attnums);
        IF idx IS NULL THEN
            RAISE EXCEPTION 'table % has no valid unique index on the key of the orphan policy of %: nothing is deleted',
                pk.parent::regclass, tbl::regclass USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        -- Every live column of the parent renamed by position: "ttl parent 1", ...
        SELECT string_agg(format('%I', 'ttl parent ' || n), ', ' ORDER BY n) INTO aliases
          FROM (SELECT row_number() OVER (ORDER BY attnum) AS n FROM pg_attribute
                 WHERE attrelid = pk.parent AND attnum > 0 AND NOT attisdropped) AS cols;
        -- The index's operator (of its opclass's input type: text's for a varchar key) and
        -- its collation (a case-insensitive index compares, and is probed, as such).
        SELECT string_agg(format('p.%I OPERATOR(%I.%s) %I%s',
                                 'ttl parent ' || (SELECT count(*) FROM pg_attribute x
                                                    WHERE x.attrelid = pk.parent AND x.attnum > 0
                                                      AND NOT x.attisdropped AND x.attnum <= k.pa),
                                 opn.nspname, op.oprname, ttl._attname(o.relid, k.ca),
                                 (SELECT format(' COLLATE %I.%I', cn.nspname, co.collname) FROM pg_collation co
                                    JOIN pg_namespace cn ON cn.oid = co.collnamespace
                                   WHERE co.oid = (i.indcollation::oid[])[ip.pos - 1
                                                                          + array_lower(i.indcollation::oid[], 1)])),
                          ' AND ' ORDER BY k.n),
               count(*)
          INTO conds, nconds
          FROM unnest(o.key_attnums, pk.attnums) WITH ORDINALITY AS k(ca, pa, n)
          JOIN pg_index i ON i.indexrelid = idx
          JOIN LATERAL (SELECT u.pos FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS u(att, pos)
                         WHERE u.att = k.pa) AS ip ON true
          JOIN pg_opclass oc ON oc.oid = (i.indclass::oid[])[ip.pos - 1 + array_lower(i.indclass::oid[], 1)]
          JOIN pg_amop am ON am.amopfamily = oc.opcfamily AND am.amoplefttype = oc.opcintype
                         AND am.amoprighttype = oc.opcintype AND am.amopstrategy = 3
          JOIN pg_operator op ON op.oid = am.amopopr
          JOIN pg_namespace opn ON opn.oid = op.oprnamespace;
        IF nconds <> cardinality(o.key_attnums) THEN
            RAISE EXCEPTION 'the key of the orphan policy of % has no equality operator in the index of %',
                tbl::regclass, pk.parent::regclass USING ERRCODE = 'undefined_object';
        END IF;
        -- Row security on the parent would hide parents from the child's owner: their
        -- children would look orphaned.
        IF EXISTS (SELECT 1 FROM pg_class pc, pg_class cc
                    WHERE pc.oid = pk.parent AND cc.oid = o.relid AND pc.relrowsecurity
                      AND (pc.relforcerowsecurity OR NOT pg_has_role(cc.relowner, pc.relowner, 'USAGE'))
                      AND NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = cc.relowner
                                                                AND (r.rolsuper OR r.rolbypassrls))) THEN
            RAISE EXCEPTION 'table % has row level security: the orphan check of % (as its owner) would not see '
                            'every parent row: nothing is deleted', pk.parent::regclass, tbl::regclass
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        -- an orphan when none of the parents has its key; the name must still be this
        -- parent's when the DELETE runs (a parent dropped and recreated during a pass is
        -- another table, and an empty one)
        -- Row security enabled on it during a pass (refused above only when a run starts):
        -- checked again by every DELETE, as the DELETE's lookup sees the parent.
        parent_name := ttl._qualified(pk.parent);
        lookups := lookups || format('pg_catalog.to_regclass(%1$L) OPERATOR(pg_catalog.=) CAST(%2$s AS pg_catalog.oid) AND '
                                     'NOT pg_catalog.row_security_active(CAST(%2$s AS pg_catalog.oid)) AND '
                                     'NOT EXISTS (SELECT 1 FROM %1$s AS p(%3$s) WHERE %4$s OFFSET 0) AND ',
            parent_name, pk.parent, aliases, conds);
    END LOOP;
    -- A key with a NULL column refers to no parent (as a foreign key, MATCH SIMPLE): never an orphan.
    lookups := lookups || (SELECT coalesce(string_agg(format('%I IS NOT NULL AND ', ttl._attname(o.relid, a)), ''), '')
                             FROM unnest(o.key_attnums) AS a
                            WHERE NOT (SELECT x.attnotnull FROM pg_attribute x WHERE x.attrelid = o.relid AND x.attnum = a));
    -- Old enough, without an age column: written by a transaction that had ended by
    -- a sample of the xid clock at least min_age before the cutoff (its xmin precedes
    -- the sample's xid; an update counts as a write). age() compares the 32-bit xmin
    -- with the sample's xid from one reference (the DELETE's transaction), in 32 bits:
    -- a row written over 2^31 transactions ago (frozen rows keep their xmin) reads as
    -- young again and stays, never early. No sample yet: nothing (ttl.orphans_waiting).
    IF o.age_attnum IS NULL THEN
        horizon := ttl._orphan_xid_horizon(o.relid, o.min_age, cutoff);
        RETURN format('(%s%s)', lookups, CASE WHEN horizon IS NULL THEN 'false' ELSE format(
            'pg_catalog.age(xmin) OPERATOR(pg_catalog.>) pg_catalog.age(CAST(%L AS pg_catalog.xid))',
            (horizon::text::numeric % 4294967296)::text) END);
    END IF;
    -- Old enough: the age column as a column policy's TTL column with min_age as its
    -- TTL (ttl._column_reached_sql: one comparison with a constant where that is exact).
    age.relid := o.relid;
    age.ttl_attnum := o.age_attnum;
    age.ttl_atttypid := (SELECT atttypid FROM pg_attribute WHERE attrelid = o.relid AND attnum = o.age_attnum);
    age.unit := o.age_unit;
    -- A row dated D may have been written until the end of D: its age counts from D + 1
    -- (months first, then the day: never before the end of D plus min_age).
    SELECT c.reached INTO age_sql
      FROM ttl._column_reached_sql(age, o.min_age + CASE WHEN age.ttl_atttypid = 'pg_catalog.date'::regtype
                                                         THEN interval '1 day' ELSE interval '0' END, cutoff) c;
    RETURN format('(%s%s)', lookups, age_sql);
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
               ('ttl_orphan_of', (SELECT string_agg(format('%s(%s)', pk.parent::regclass,
                                            (SELECT string_agg(quote_ident(ttl._attname(pk.parent, a)), ', ' ORDER BY n)
                                               FROM unnest(pk.attnums) WITH ORDINALITY AS u(a, n))), ', ' ORDER BY pk.n)
                                    FROM ttl._orphan_parents(o.parent_relids, o.parent_attnums,
                                                             cardinality(o.key_attnums)) pk)),
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

-- The parents of "ttl_orphan_of" ('metadata(hash)', 'a(x), b(y)', 'a, b'): one
-- (table, key columns or NULL) per comma outside double quotes and parentheses.
CREATE OR REPLACE FUNCTION ttl._parse_orphan_of(spec text, OUT tables text[], OUT columns text[])
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    items text[] := '{}';
    item text := '';
    ch text;
    quoted boolean := false;
    depth integer := 0;
    m text[];
BEGIN
    tables := '{}';
    columns := '{}';
    FOREACH ch IN ARRAY regexp_split_to_array(coalesce(spec, ''), '') LOOP
        IF ch = '"' THEN
            quoted := NOT quoted;
        ELSIF NOT quoted AND ch = '(' THEN
            depth := depth + 1;
        ELSIF NOT quoted AND ch = ')' THEN
            depth := depth - 1;
        END IF;
        IF ch = ',' AND NOT quoted AND depth = 0 THEN
            items := items || item;
            item := '';
        ELSE
            item := item || ch;
        END IF;
        IF depth < 0 OR depth > 1 THEN
            EXIT;
        END IF;
    END LOOP;
    items := items || item;
    FOREACH item IN ARRAY items LOOP
        m := regexp_match(item, '^\s*([^()]*?)\s*(?:\(\s*([^()]*?)\s*\))?\s*$');
        IF quoted OR depth <> 0 OR m IS NULL OR m[1] = '' THEN
            RAISE EXCEPTION 'value of "ttl_orphan_of" must name the parent tables, e.g. ''metadata(hash)'' or ''a(x), b(y)'', got "%"',
                coalesce(spec, 'NULL') USING ERRCODE = 'invalid_parameter_value';
        END IF;
        tables := tables || m[1];
        columns := columns || m[2];
    END LOOP;
END
$fn$;

-- TTL DDL's spelling (ALTER TABLE data SET (ttl_orphan_of = 'metadata(hash)',
-- ttl_orphan_key = 'hash', ttl_orphan_min_age = '1 hour',
-- ttl_orphan_age_column = 'created_at')): options as text, merged into the
-- table's orphan policy; NULL resets one. Several parents: ttl_orphan_of =
-- 'a(x), b(y)'. A parent's key defaults to the child's key names; an
-- unqualified parent is looked up in the child's schema.
CREATE OR REPLACE FUNCTION ttl.set_orphan_options(tbl regclass, options jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    cur ttl.orphan_policy;
    kv record;
    v text;
    parents text[];  -- the parent tables, as written
    parent_cols text[];  -- each parent's key columns, comma-separated; NULL: the key's names
    parent_keys text[];
    parsed record;
    cols text[];
    k integer;
    key_cols text[];
    min_age interval;
    age_column name;
    age_unit text;
    job_cron text;
    range_bytes bigint;
    dbs integer;
BEGIN
    PERFORM ttl._check_table(tbl);
    IF jsonb_typeof(options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object of option names and values' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO cur FROM ttl.orphan_policy WHERE relid = tbl;
    IF FOUND THEN
        SELECT array_agg(ttl._qualified(pk.parent) ORDER BY pk.n),
               array_agg((SELECT string_agg(quote_ident(ttl._attname(pk.parent, a)), ',') FROM unnest(pk.attnums) a)
                         ORDER BY pk.n)
          INTO parents, parent_cols
          FROM ttl._orphan_parents(cur.parent_relids, cur.parent_attnums, cardinality(cur.key_attnums)) pk
         WHERE ttl._qualified(pk.parent) IS NOT NULL;
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
                parsed := ttl._parse_orphan_of(v);
                parents := parsed.tables;
                parent_cols := parsed.columns;
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
    IF parents IS NULL THEN
        RAISE EXCEPTION 'table %: "ttl_orphan_of" must name the parent table', tbl USING ERRCODE = 'invalid_parameter_value';
    END IF;
    parent_keys := '{}';
    FOR k IN 1 .. cardinality(parents) LOOP
        -- An unqualified parent is the child's schema's (this function's search_path is pinned).
        IF cardinality(parse_ident(parents[k])) = 1 THEN
            parents[k] := format('%I.%I', (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                            WHERE c.oid = tbl), (parse_ident(parents[k]))[1]);
        END IF;
        cols := CASE WHEN parent_cols[k] IS NULL THEN key_cols
                     ELSE ARRAY(SELECT (parse_ident(btrim(c)))[1] FROM unnest(string_to_array(parent_cols[k], ',')) AS c)
                END;
        IF key_cols IS NULL THEN
            parent_keys := NULL;  -- refused below: the key must be named
            CONTINUE;
        END IF;
        IF cardinality(cols) <> cardinality(key_cols) THEN
            RAISE EXCEPTION 'table %: "ttl_orphan_key" has % columns, but the key of parent % in "ttl_orphan_of" has %',
                tbl, cardinality(key_cols), parents[k], cardinality(cols)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Each parent''s key has as many columns as the child''s, in the same order.';
        END IF;
        parent_keys := parent_keys || ARRAY[cols];
    END LOOP;
    PERFORM ttl.enable_orphans(tbl, key_cols, NULL, parent_keys, coalesce(min_age, interval '1 hour'), age_column,
                               age_unit, job_cron, range_bytes, dbs, ARRAY(SELECT t::regclass FROM unnest(parents) t));
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
