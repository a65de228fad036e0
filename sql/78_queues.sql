-- Expiration queues (the "ttl_queue_shards" option): beside a table, its rows'
-- expiries in N shards, so a pass reads what expired in (expiry, key) order
-- and costs O(expired rows), without an index on the expiry in the hot table
-- (an index there makes every UPDATE that refreshes the expiry a non-HOT one).
--
-- The queue of table T is ttl."<T>_<oid>_queue" (kept by oid: a rename keeps
-- it), list-partitioned by shard into ttl."<T>_<oid>_queue_<k>", each with the
-- primary key (shard, expires_at, k1, ..., kn): k1..kn are T's key (its primary
-- key, or a unique index on NOT NULL columns). A row's shard is a hash of its
-- key: the triggers find an entry again on UPDATE and DELETE without an index
-- on the key, and a unique key spreads evenly over the shards.
--
-- Triggers keep the queue exact. INSERT (and COPY), DELETE and TRUNCATE:
-- statement-level, with transition tables (a bulk write costs one statement
-- per write statement, not one per row). UPDATE: row-level, fired only when
-- the row's expiry column or key changed (the WHEN clause, evaluated without
-- calling any function: an UPDATE of other columns costs nothing), moving the
-- row's entry. They run as T's owner (SECURITY DEFINER functions owned by that
-- owner), so the owner's expression never runs with anybody else's rights, and
-- writers need no right on the queue.
--
-- ttl._queue_sync makes the queue match the option (created, rebuilt when the
-- expiry definition or the shard count changes, dropped); the SQL API calls it
-- after every policy change, DROP TABLE through the event trigger. Existing rows
-- are added by ttl.queue_backfill in key order, batch by batch (resumable, the
-- table stays writable); the engine drains a queue once it is filled.

-- T's key: its primary key, else a unique index on NOT NULL columns, no
-- expressions, no predicate; NULL when there is none.
CREATE OR REPLACE FUNCTION ttl._queue_key(tbl oid) RETURNS smallint[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT i.indkey::smallint[]
      FROM pg_index i
     WHERE i.indrelid = tbl AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
       AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                        WHERE a.attrelid = tbl AND a.attnum = ANY (i.indkey::smallint[]) AND NOT a.attnotnull)
     ORDER BY i.indisprimary DESC, i.indnatts, i.indexrelid
     LIMIT 1
$fn$;

-- The shard of a row, over its key columns (each named `prefix` || column:
-- '' for a table's own columns, 'OLD.', 'NEW.'): each key column hashed by its
-- type's own hash function (the default hash operator class), so the same
-- shard whatever the session's TimeZone or DateStyle (a key's text form
-- depends on them), combined, modulo the shard count. A type without its own
-- class (arrays, enums, ranges: polymorphic ones), or whose class's function is
-- declared for another type (timestamptz), goes through hash_record, which
-- costs more per statement. Every name in it is schema-qualified: it is safe
-- under any search_path.
CREATE OR REPLACE FUNCTION ttl._queue_shard_sql(tbl oid, key smallint[], prefix text, shards integer) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('(((%s) OPERATOR(pg_catalog.&) 2147483647) OPERATOR(pg_catalog.%%) %s)::pg_catalog.int2',
                  string_agg(h.term, ' OPERATOR(pg_catalog.#) ' ORDER BY k.ord), shards)
      FROM unnest(key) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum
      CROSS JOIN LATERAL (
          SELECT coalesce(
              (SELECT format('%I.%I(%s%I::%I.%I)', pn.nspname, pp.proname, prefix, a.attname, tn.nspname, tt.typname)
                 FROM pg_opclass oc
                 JOIN pg_type tt ON tt.oid = oc.opcintype
                 JOIN pg_namespace tn ON tn.oid = tt.typnamespace
                 JOIN pg_am am ON am.oid = oc.opcmethod AND am.amname = 'hash'
                 JOIN pg_amproc ap ON ap.amprocfamily = oc.opcfamily AND ap.amproclefttype = oc.opcintype
                                  AND ap.amprocrighttype = oc.opcintype AND ap.amprocnum = 1
                 JOIN pg_proc pp ON pp.oid = ap.amproc
                 JOIN pg_namespace pn ON pn.oid = pp.pronamespace
                WHERE oc.opcdefault
                  AND (oc.opcintype = a.atttypid
                       OR oc.opcintype = (SELECT t.typbasetype FROM pg_type t WHERE t.oid = a.atttypid)
                       OR EXISTS (SELECT 1 FROM pg_cast c WHERE c.castsource = a.atttypid
                                     AND c.casttarget = oc.opcintype AND c.castmethod = 'b'))
                  AND oc.opcintype NOT IN ('anyarray'::regtype, 'anyenum'::regtype, 'anyrange'::regtype,
                                           'anymultirange'::regtype, 'record'::regtype)
                  -- a function declared for another type (timestamptz's is timestamp_hash(timestamp))
                  -- would need a cast, and a cast may depend on the session (TimeZone)
                  AND pp.proargtypes[0] = oc.opcintype
                ORDER BY oc.opcintype = a.atttypid DESC
                LIMIT 1),
              format('pg_catalog.hash_record(ROW(%s%I))', prefix, a.attname)) AS hash
      ) h0
      CROSS JOIN LATERAL (SELECT CASE WHEN k.ord = 1 THEN h0.hash
                                      ELSE format('(%s OPERATOR(pg_catalog.<<) %s)', h0.hash, (k.ord * 7) % 31) END AS term) h
$fn$;

-- The pieces of SQL a queue's statements are built from (an error for a table
-- without a queue), but the shard expression (ttl._queue_sql adds it):
--   keys:  T's key columns, quoted, in order ("id", "region")
--   ks:    the queue's own names for them (k1, k2)
--   types: their types, as SQL
--   expiry: when a row expires, over T's columns (ttl._row_expiry_sql)
--   src:    T's rows as a FROM item: ONLY T, or for a partitioned T T itself
--           (its partitions' rows)
-- A pass builds its statements from these alone: the shard expression's catalog
-- query costs several milliseconds to plan, and a shard's entries need no hash
-- (the shard is known).
CREATE OR REPLACE FUNCTION ttl._queue_parts(tbl oid, OUT qname text, OUT keys text[], OUT ks text[], OUT types text[],
                                            OUT expiry text, OUT shards integer, OUT src text, OUT parted boolean,
                                            OUT key_attnums smallint[])
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    q ttl.queue;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    IF q.relid IS NULL OR p.relid IS NULL THEN
        RAISE EXCEPTION 'table % has no expiration queue', tbl::regclass USING ERRCODE = 'undefined_object',
            HINT = 'Set "ttl_queue_shards" first.';
    END IF;
    qname := ttl._qualified(q.queue_relid);  -- in schema ttl
    SELECT array_agg(format('%I', a.attname) ORDER BY k.ord), array_agg(format('k%s', k.ord) ORDER BY k.ord),
           array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord)
      INTO keys, ks, types
      FROM unnest(q.key_attnums) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum;
    expiry := ttl._row_expiry_sql(p);
    shards := q.shards;
    key_attnums := q.key_attnums;
    parted := (SELECT relkind = 'p' FROM pg_class WHERE oid = tbl);
    src := CASE WHEN parted THEN tbl::regclass::text ELSE 'ONLY ' || tbl::regclass::text END;
END
$fn$;

-- ttl._queue_parts with shard: the shard of a row, over T's key columns.
CREATE OR REPLACE FUNCTION ttl._queue_sql(tbl oid, OUT qname text, OUT keys text[], OUT ks text[], OUT types text[],
                                          OUT expiry text, OUT shard text, OUT shards integer, OUT src text,
                                          OUT parted boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    key smallint[];
BEGIN
    SELECT q.qname, q.keys, q.ks, q.types, q.expiry, q.shards, q.src, q.parted, q.key_attnums
      INTO qname, keys, ks, types, expiry, shards, src, parted, key
      FROM ttl._queue_parts(tbl) q;
    shard := ttl._queue_shard_sql(tbl, key, '', shards);
END
$fn$;

-- A queue position [expires_at, k1, ..., kn] given as parameter $param (jsonb), as
-- a row of typed values to compare (expires_at, k1, ..., kn) with.
CREATE OR REPLACE FUNCTION ttl._queue_pos_sql(types text[], param integer) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('($%s::pg_catalog.jsonb OPERATOR(pg_catalog.->>) 0)::pg_catalog.timestamptz', param)
           || string_agg(format(', ($%s::pg_catalog.jsonb OPERATOR(pg_catalog.->>) %s)::%s', param, i, types[i]), ''
                         ORDER BY i)
      FROM generate_subscripts(types, 1) i
$fn$;

-- `lefts[i] = rights[i]` for each key column i of T's queue, with each key
-- type's own equality operator named with its schema (the default btree
-- operator class's, so the queue's primary key can serve it): safe under any
-- search_path.
CREATE OR REPLACE FUNCTION ttl._queue_eq_sql(tbl oid, lefts text[], rights text[]) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT string_agg(format('%s OPERATOR(%I.=) %s', lefts[k.ord], coalesce(op.nsp, 'pg_catalog'), rights[k.ord]),
                      ' AND ' ORDER BY k.ord)
      FROM ttl.queue q
     CROSS JOIN LATERAL unnest(q.key_attnums) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum
      LEFT JOIN LATERAL (
          SELECT n.nspname AS nsp
            FROM pg_opclass oc
            JOIN pg_am am ON am.oid = oc.opcmethod AND am.amname = 'btree'
            JOIN pg_amop ao ON ao.amopfamily = oc.opcfamily AND ao.amoplefttype = oc.opcintype
                           AND ao.amoprighttype = oc.opcintype AND ao.amopstrategy = 3
            JOIN pg_operator o ON o.oid = ao.amopopr
            JOIN pg_namespace n ON n.oid = o.oprnamespace
           WHERE oc.opcdefault
             AND oc.opcintype IN (a.atttypid, (SELECT t.typbasetype FROM pg_type t WHERE t.oid = a.atttypid))
           ORDER BY oc.opcintype = a.atttypid DESC
           LIMIT 1) op ON true
     WHERE q.relid = tbl
$fn$;

-- The trigger functions of T's queue that exist (none, one or both).
CREATE OR REPLACE FUNCTION ttl._queue_functions(tbl oid) RETURNS oid[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(array_agg(p.oid), '{}')
      FROM pg_proc p
     WHERE p.pronamespace = 'ttl'::regnamespace
       AND p.proname IN (format('queue_%s_sync', tbl), format('queue_%s_move', tbl)) AND p.pronargs = 0
$fn$;

-- Drop T's queue: its triggers (on T, and on its partitions), its trigger
-- functions and its tables.
CREATE OR REPLACE FUNCTION ttl._queue_drop(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    q ttl.queue;
    t record;
BEGIN
    -- The record first: dropping the queue table fires the event trigger again.
    DELETE FROM ttl.queue WHERE relid = tbl RETURNING * INTO q;
    IF q.relid IS NULL THEN
        RETURN;
    END IF;
    -- Wherever they are (a partition detached meanwhile included); a row
    -- trigger's clones on partitions go with it.
    FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_trigger tg
              WHERE tg.tgfoid = ANY (ttl._queue_functions(tbl)) AND tg.tgparentid = 0 LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = q.queue_relid) THEN
        EXECUTE format('DROP TABLE %s', q.queue_relid::regclass);
    END IF;
    EXECUTE format('DROP FUNCTION IF EXISTS ttl.%I()', format('queue_%s_sync', tbl));
    EXECUTE format('DROP FUNCTION IF EXISTS ttl.%I()', format('queue_%s_move', tbl));
END
$fn$;

-- Only pg_ttl's own functions (ttl._queue_sync, the DROP event trigger) drop a queue.
REVOKE ALL ON FUNCTION ttl._queue_drop(oid) FROM PUBLIC;

-- Make T's queue match its policy: none without "ttl_queue_shards", else one
-- with that many shards for the current expiry definition (rebuilt, and filled
-- again, when either changed), with its triggers on T and, for a partitioned
-- T, on each of its partitions (ttl._queue_triggers). The event triggers call
-- it after CREATE TABLE ... PARTITION OF and ALTER TABLE (ATTACH, DETACH).
-- SECURITY DEFINER: the queue lives in pg_ttl's schema; it acts only on what the
-- policy row says, and only T's owners can write that row (row security on
-- ttl.policy).
CREATE OR REPLACE FUNCTION ttl._queue_sync(tbl oid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    q ttl.queue;
    c record;
    key smallint[];
    base text;
    parent text;
    s record;
    k integer;
    cols text := '';
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    IF q.relid IS NOT NULL AND (p.relid IS NULL OR p.queue_shards = 0 OR p.queue_shards <> q.shards
                                OR obj_description(q.queue_relid, 'pg_class') IS DISTINCT FROM ttl._row_expiry_sql(p)) THEN
        PERFORM ttl._queue_drop(tbl);
        q := NULL;
    END IF;
    IF p.relid IS NULL OR p.queue_shards = 0 THEN
        RETURN;
    END IF;
    IF q.relid IS NOT NULL THEN
        PERFORM ttl._queue_triggers(tbl, false);  -- partitions created, attached or detached since
        -- the table renamed, moved to another schema, its key renamed, a new owner:
        -- the queue follows its owner, the trigger functions are written anew
        FOR s IN SELECT c2.oid FROM pg_class c2 JOIN pg_class t2 ON t2.oid = tbl
                  WHERE (c2.oid = q.queue_relid OR c2.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = q.queue_relid))
                    AND c2.relowner <> t2.relowner LOOP
            EXECUTE format('ALTER TABLE %s OWNER TO %I', s.oid::regclass,
                           (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = tbl));
        END LOOP;
        IF EXISTS (SELECT 1 FROM pg_proc pp JOIN pg_class t2 ON t2.oid = tbl
                    WHERE pp.oid = ANY (ttl._queue_functions(tbl))
                      AND (pp.proowner <> t2.relowner
                           OR pp.prosrc IS DISTINCT FROM CASE WHEN pp.proname = format('queue_%s_sync', tbl)
                                                              THEN ttl._queue_trigger_body(tbl)
                                                              ELSE ttl._queue_move_body(tbl) END
                           OR NOT format('search_path=pg_catalog, %I, pg_temp',
                                         (SELECT nspname FROM pg_namespace WHERE oid = t2.relnamespace))
                                  = ANY (pp.proconfig))) THEN
            PERFORM ttl._queue_triggers(tbl, true);
        END IF;
        RETURN;
    END IF;
    SELECT c2.relname, c2.relkind, c2.relowner, n.nspname INTO c
      FROM pg_class c2 JOIN pg_namespace n ON n.oid = c2.relnamespace WHERE c2.oid = tbl;
    IF c.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table: "ttl_queue_shards" needs one', tbl::regclass
            USING ERRCODE = 'wrong_object_type';
    END IF;
    key := ttl._queue_key(tbl);
    IF key IS NULL THEN
        RAISE EXCEPTION 'table % has no primary key or unique index on NOT NULL columns: "ttl_queue_shards" needs one', tbl::regclass
            USING ERRCODE = 'invalid_table_definition',
                  HINT = 'The queue finds a row again by its key. Add a primary key, or leave "ttl_queue_shards" at 0.';
    END IF;
    -- A row's shard hashes its key with the key types' hash functions.
    BEGIN
        EXECUTE format('SELECT %s FROM (SELECT %s) r', ttl._queue_shard_sql(tbl, key, '', 1),
                       (SELECT string_agg(format('NULL::%s AS %I', format_type(a.atttypid, a.atttypmod), a.attname), ', ')
                          FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum = ANY (key)));
    EXCEPTION WHEN undefined_function THEN
        RAISE EXCEPTION 'the key of table % cannot be hashed: %', tbl::regclass, SQLERRM
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'The queue spreads rows over its shards by a hash of the key; use a key of hashable types.';
    END;
    base := left(c.relname, 40) || '_' || tbl || '_queue';
    parent := format('ttl.%I', base);
    FOR s IN SELECT k2.ord, format_type(a.atttypid, a.atttypmod) AS typ
               FROM unnest(key) WITH ORDINALITY k2(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k2.attnum ORDER BY k2.ord LOOP
        cols := cols || format(', k%s %s NOT NULL', s.ord, s.typ);
    END LOOP;
    EXECUTE format('CREATE TABLE %s (shard smallint NOT NULL, expires_at timestamptz NOT NULL%s,'
                   ' PRIMARY KEY (shard, expires_at, %s)) PARTITION BY LIST (shard)',
                   parent, cols, (SELECT string_agg(format('k%s', i), ', ') FROM generate_series(1, cardinality(key)) i));
    FOR k IN 0 .. p.queue_shards - 1 LOOP
        EXECUTE format('CREATE TABLE ttl.%I PARTITION OF %s FOR VALUES IN (%s)', base || '_' || k, parent, k);
        EXECUTE format('ALTER TABLE ttl.%I OWNER TO %I', base || '_' || k, pg_get_userbyid(c.relowner));
    END LOOP;
    EXECUTE format('ALTER TABLE %s OWNER TO %I', parent, pg_get_userbyid(c.relowner));
    -- The definition the entries were computed with: a change rebuilds the queue.
    EXECUTE format('COMMENT ON TABLE %s IS %L', parent, ttl._row_expiry_sql(p));
    INSERT INTO ttl.queue (relid, queue_relid, shards, key_attnums)
    VALUES (tbl, parent::regclass, p.queue_shards, key);
    PERFORM ttl._queue_triggers(tbl, true);
    RAISE NOTICE 'table % has an expiration queue of % shards (%); existing rows are added to it by the next pass (or SELECT ttl.queue_backfill(%))',
        tbl::regclass, p.queue_shards, parent, quote_literal(tbl::regclass::text);
END
$fn$;

-- T's queue triggers: with `refresh`, its trigger functions (re)written and
-- every trigger made anew (a new queue; an upgrade of pg_ttl); else only the
-- partitions that lack them get them, and tables no longer T's partitions
-- (detached) lose theirs.
--   ttl_queue_insert, _delete: statement-level, on T and on each partition of a
--     partitioned T (a write made directly to a partition fires only its own
--     statement triggers; one made through T only T's).
--   ttl_queue_truncate: on T (TRUNCATE of T empties the queue; the entries of a
--     partition truncated alone are removed by the drain, their rows being gone).
--   ttl_queue_update: row-level, on T (a partitioned T's partitions get it
--     from T, those created later included), fired by its WHEN clause only for
--     an UPDATE after which the row's entry may be late: see ttl._queue_changed_sql.
--   ttl_queue_moves: statement-level, on a partitioned T and its partitioned
--     partitions: an UPDATE that moves rows to another partition fires no row
--     UPDATE trigger, only this one.
-- A partition attached with rows makes the queue fill again (its rows have no
-- entries yet); an empty one does not.
CREATE OR REPLACE FUNCTION ttl._queue_triggers(tbl oid, refresh boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    owner name := (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = tbl);
    nsp name := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl);
    fn text := format('queue_%s_sync', tbl);
    move_fn text := format('queue_%s_move', tbl);
    f text;
    t record;
    r record;
    members oid[];
    filled boolean := false;
BEGIN
    IF refresh THEN
        FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_trigger tg
                  WHERE tg.tgfoid = ANY (ttl._queue_functions(tbl)) AND tg.tgparentid = 0 LOOP
            EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass);
        END LOOP;
        -- Names resolve as the engine resolves them (an expiration expression may
        -- name the table schema's functions): a SECURITY DEFINER function pins its
        -- search_path, so nothing of the writer's can stand in for a built-in
        -- (every name in the body is qualified too).
        EXECUTE format(
            'CREATE OR REPLACE FUNCTION ttl.%I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
            ' SET search_path = pg_catalog, %I, pg_temp SET TimeZone = ''UTC'' AS %L',
            fn, nsp, ttl._queue_trigger_body(tbl));
        EXECUTE format(
            'CREATE OR REPLACE FUNCTION ttl.%I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
            ' SET search_path = pg_catalog, %I, pg_temp SET TimeZone = ''UTC'' SET plan_cache_mode = force_generic_plan AS %L',
            move_fn, nsp, ttl._queue_move_body(tbl));
        FOREACH f IN ARRAY ARRAY[fn, move_fn] LOOP
            EXECUTE format('ALTER FUNCTION ttl.%I() OWNER TO %I', f, owner);
            EXECUTE format('REVOKE ALL ON FUNCTION ttl.%I() FROM PUBLIC', f);
        END LOOP;
        EXECUTE format('CREATE TRIGGER ttl_queue_update AFTER UPDATE ON %s FOR EACH ROW WHEN (%s)'
                       ' EXECUTE FUNCTION ttl.%I()', tbl::regclass, ttl._queue_changed_sql(tbl), move_fn);
        EXECUTE format('CREATE TRIGGER ttl_queue_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()',
                       tbl::regclass, fn);
    END IF;
    SELECT array_agg(relid) INTO members FROM pg_partition_tree(tbl);
    members := coalesce(members, ARRAY[tbl]);
    -- Tables detached from T keep no trigger of its queue.
    FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_trigger tg
              WHERE tg.tgfoid = ANY (ttl._queue_functions(tbl)) AND tg.tgparentid = 0
                AND tg.tgrelid <> ALL (members) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass);
    END LOOP;
    FOR r IN SELECT c.oid, c.relkind FROM pg_class c WHERE c.oid = ANY (members)
              AND NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = c.oid AND tg.tgname = 'ttl_queue_insert') LOOP
        EXECUTE format('CREATE TRIGGER ttl_queue_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()', r.oid::regclass, fn);
        EXECUTE format('CREATE TRIGGER ttl_queue_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()', r.oid::regclass, fn);
        IF r.relkind = 'p' THEN
            EXECUTE format('CREATE TRIGGER ttl_queue_moves AFTER UPDATE ON %s'
                           ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()', r.oid::regclass, fn);
        ELSIF NOT refresh AND r.oid <> tbl THEN
            -- a partition new to T: attached with rows, they need entries
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', r.oid::regclass) INTO filled;
            IF filled THEN
                UPDATE ttl.queue SET backfilled = false, backfill_after = NULL WHERE relid = tbl;
                RAISE NOTICE 'partition % was attached with rows: the expiration queue of % is filled again by the next pass',
                    r.oid::regclass, tbl::regclass;
            END IF;
        END IF;
    END LOOP;
END
$fn$;

REVOKE ALL ON FUNCTION ttl._queue_triggers(oid, boolean) FROM PUBLIC;

-- The body of T's statement-level trigger function: entries as sets of
-- (shard, expiry, key) from the transition tables. INSERT adds; DELETE removes
-- the entries at the rows' expiry (an entry left earlier than that, see
-- ttl._queue_changed_sql, is removed by the drain: its row is gone); UPDATE (of
-- a partitioned table: rows moved to another partition) adds an entry for each
-- key new to the statement and removes those of keys it no longer has. Every
-- name in it is schema-qualified, operators included, and its function pins its
-- search_path besides (ttl._queue_triggers).
CREATE OR REPLACE FUNCTION ttl._queue_trigger_body(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    keysel text;
    ks text;
    match text;
    pre text[];
BEGIN
    s := ttl._queue_sql(tbl);
    ks := array_to_string(s.ks, ', ');
    keysel := (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i);
    match := 'q.shard OPERATOR(pg_catalog.=) o.shard AND q.expires_at OPERATOR(pg_catalog.=) o.expires_at AND '
             || ttl._queue_eq_sql(tbl, (SELECT array_agg('q.' || k) FROM unnest(s.ks) k),
                                  (SELECT array_agg('o.' || k) FROM unnest(s.ks) k));
    RETURN format($body$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        -- A plain INSERT costs about half of one with ON CONFLICT (no
        -- speculative insertion per entry); an entry can already be there
        -- only when an earlier row with that key left it at that very expiry
        -- (or the fill added it meanwhile): then again, keeping those, locked
        -- (DO UPDATE), so that a drain removing one as its row's is gone waits
        -- for this transaction and then sees the new row (ttl.queue_drain_sql: recheck).
        BEGIN
            INSERT INTO %1$s (shard, expires_at, %2$s)
            SELECT * FROM (%3$s) n WHERE n.expires_at IS NOT NULL;
        EXCEPTION WHEN unique_violation THEN
            INSERT INTO %1$s (shard, expires_at, %2$s)
            SELECT * FROM (%3$s) n WHERE n.expires_at IS NOT NULL
                ON CONFLICT (shard, expires_at, %2$s) DO UPDATE SET expires_at = EXCLUDED.expires_at;
        END;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        -- A pass removes the entries of the rows it deletes itself, by their
        -- position, and says so for its own statement (ttl.queue_drain_sql).
        -- Anyone else setting it only leaves entries whose row is gone: the
        -- drain removes them.
        IF pg_catalog.current_setting('pg_ttl.queue_drain', true) IS DISTINCT FROM %5$L THEN
            DELETE FROM %1$s q USING (%4$s) o WHERE %6$s;
        END IF;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        DELETE FROM %1$s q USING (%4$s) o WHERE %6$s AND NOT EXISTS (SELECT 1 FROM new_rows n WHERE %7$s);
        INSERT INTO %1$s (shard, expires_at, %2$s)
        SELECT * FROM (%3$s) n WHERE n.expires_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM (%9$s) o WHERE %8$s
                              AND o.expires_at OPERATOR(pg_catalog.<=) n.expires_at) ON CONFLICT DO NOTHING;
    ELSE
        TRUNCATE %1$s;
        UPDATE ttl.queue SET backfill_after = NULL, backfilled = true
         WHERE relid OPERATOR(pg_catalog.=) CAST(%5$s AS pg_catalog.oid);
    END IF;
    RETURN NULL;
END
$body$, s.qname, ks, format('SELECT %s AS shard, %s AS expires_at, %s FROM new_rows', s.shard, s.expiry, keysel),
        format('SELECT %s AS shard, %s AS expires_at, %s FROM old_rows', s.shard, s.expiry, keysel), tbl, match,
        ttl._queue_eq_sql(tbl, (SELECT array_agg('n.' || k) FROM unnest(s.keys) k),
                          (SELECT array_agg('o.' || k) FROM unnest(s.ks) k)),
        ttl._queue_eq_sql(tbl, (SELECT array_agg('o.k' || i) FROM generate_subscripts(s.keys, 1) i),
                          (SELECT array_agg('n.' || k) FROM unnest(s.ks) k)),
        format('SELECT %s AS expires_at, %s FROM old_rows', s.expiry,
               (SELECT string_agg(format('%s AS k%s', s.keys[i], i), ', ') FROM generate_subscripts(s.keys, 1) i)));
END
$fn$;

-- The column whose value is the row's expiry, or from which it is computed by
-- a non-decreasing function (a TTL column: its value plus ttl_expire_after, in
-- UTC; a per-row TTL's expiry column), as a quoted name; NULL when the expiry
-- is an expression (a CQL-style table's included: its values count too).
CREATE OR REPLACE FUNCTION ttl._queue_expiry_column(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF p.ttl_attnum IS NOT NULL AND p.expiration_expression IS NULL THEN
        RETURN format('%I', ttl._attname(tbl, p.ttl_attnum));
    ELSIF p.row_expiry_attnum IS NOT NULL AND p.row_values_attnum IS NULL THEN
        IF p.expiration_expression IS NOT DISTINCT FROM ttl._managed_expression(p) THEN
            RETURN format('%I', ttl._attname(tbl, p.row_expiry_attnum));
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;

-- When an UPDATE needs the row trigger (its WHEN clause). A row's entry may be
-- EARLY, never late: every row with an expiry has an entry at or before it. An
-- UPDATE that keeps the key and makes the expiry later (the usual refresh,
-- SET seen_at = now()), keeps it, or makes it NULL leaves the entry where it
-- is: the drain, reaching an entry whose row expires later, moves it there. So
-- the trigger fires only when the key changed, the expiry column got a smaller
-- value, or got one after NULL; the expiry being non-decreasing in that column,
-- the column is compared as it is, and such an UPDATE runs no function and
-- stays a HOT update. An expression may read any column: then any change fires
-- it, and the function compares the expiries. No function call in the
-- condition: it runs as whoever updates.
CREATE OR REPLACE FUNCTION ttl._queue_changed_sql(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    q ttl.queue;
    col text := ttl._queue_expiry_column(tbl);
    keys text[];
BEGIN
    IF col IS NULL THEN
        RETURN 'OLD.* IS DISTINCT FROM NEW.*';
    END IF;
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    SELECT array_agg(format('%I', a.attname) ORDER BY k.ord) INTO keys
      FROM unnest(q.key_attnums) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum;
    RETURN format('(%1$s) IS DISTINCT FROM (%2$s) OR NEW.%3$s OPERATOR(pg_catalog.<) OLD.%3$s'
                  ' OR (OLD.%3$s IS NULL AND NEW.%3$s IS NOT NULL)',
                  (SELECT string_agg('OLD.' || k, ', ') FROM unnest(keys) k),
                  (SELECT string_agg('NEW.' || k, ', ') FROM unnest(keys) k), col);
END
$fn$;

-- The body of T's row-level UPDATE trigger function. Same key and a later (or
-- the same, or no) expiry: nothing (the entry stays early). Else the old entry
-- goes, unless a row of the table has that key at that expiry now (AFTER row
-- triggers fire once the whole statement is done: rows that swapped keys keep
-- their entries; a row whose key did not change cannot have lost it to
-- another), and one at the new expiry is added. An entry the row had left
-- earlier than its old expiry is not at the old expiry: it stays, and the
-- drain removes it (its row is gone or expires later). For an expiry column the
-- expiry and the shard are plain expressions over OLD and NEW (no query); an
-- expression policy's expression is read over the row in a query. Its
-- statements keep one plan (plan_cache_mode): with the shard known, the
-- planner would otherwise plan each UPDATE anew to prune the other shards. Column
-- names win over the function's own variables, whose names no table is likely
-- to use.
CREATE OR REPLACE FUNCTION ttl._queue_move_body(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    p ttl.policy;
    col text := ttl._queue_expiry_column(tbl);
    old_e text;
    new_e text;
    old_k text;
    new_k text;
BEGIN
    s := ttl._queue_sql(tbl);
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    old_k := (SELECT string_agg('OLD.' || k, ', ') FROM unnest(s.keys) k);
    new_k := (SELECT string_agg('NEW.' || k, ', ') FROM unnest(s.keys) k);
    IF col IS NOT NULL AND p.ttl_attnum IS NULL THEN
        old_e := format('pg_ttl_old_expiry := OLD.%s;', col);
        new_e := format('pg_ttl_new_expiry := NEW.%s;', col);
    ELSIF col IS NOT NULL THEN
        old_e := format('pg_ttl_old_expiry := %s;', ttl._expiry_sql(p.ttl_atttypid, p.unit, p.expire_after, 'OLD.' || col));
        new_e := format('pg_ttl_new_expiry := %s;', ttl._expiry_sql(p.ttl_atttypid, p.unit, p.expire_after, 'NEW.' || col));
    ELSE
        old_e := format('SELECT %s INTO pg_ttl_old_expiry FROM (SELECT OLD.*) r;', s.expiry);
        new_e := format('SELECT %s INTO pg_ttl_new_expiry FROM (SELECT NEW.*) r;', s.expiry);
    END IF;
    RETURN format($body$
#variable_conflict use_column
DECLARE
    pg_ttl_old_expiry timestamptz;
    pg_ttl_new_expiry timestamptz;
BEGIN
    %2$s
    %3$s
    IF (%4$s) IS NOT DISTINCT FROM (%5$s)
       AND (pg_ttl_new_expiry IS NULL OR pg_ttl_new_expiry OPERATOR(pg_catalog.>=) pg_ttl_old_expiry) THEN
        RETURN NULL;
    END IF;
    IF pg_ttl_old_expiry IS NOT NULL AND ((%4$s) IS NOT DISTINCT FROM (%5$s) OR NOT EXISTS (
           SELECT 1 FROM %6$s m WHERE (%7$s) = (%4$s) AND %8$s = pg_ttl_old_expiry)) THEN
        DELETE FROM %1$s q WHERE q.shard = %9$s AND q.expires_at = pg_ttl_old_expiry AND (%10$s) = (%4$s);
    END IF;
    IF pg_ttl_new_expiry IS NOT NULL THEN
        -- An entry there already is kept locked (DO UPDATE) till this transaction
        -- ends: a repair removing it as not at the row's expiry (ttl.queue_verify,
        -- reading the row as it was) waits, then its next statement sees this row.
        INSERT INTO %1$s (shard, expires_at, %11$s) VALUES (%12$s, pg_ttl_new_expiry, %5$s)
            ON CONFLICT (shard, expires_at, %11$s) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    END IF;
    RETURN NULL;
END
$body$, s.qname, old_e, new_e, old_k, new_k, s.src,
        (SELECT string_agg('m.' || k, ', ') FROM unnest(s.keys) k), s.expiry,
        ttl._queue_shard_sql(tbl, (SELECT key_attnums FROM ttl.queue WHERE relid = tbl), 'OLD.', s.shards),
        (SELECT string_agg('q.' || k, ', ') FROM unnest(s.ks) k),
        array_to_string(s.ks, ', '),
        ttl._queue_shard_sql(tbl, (SELECT key_attnums FROM ttl.queue WHERE relid = tbl), 'NEW.', s.shards));
END
$fn$;

-- Add T's existing rows to its queue: up to `batch` rows after the last key
-- done, in key order; returns the rows read (0 once the queue is filled). Rows
-- written meanwhile are the triggers' (ON CONFLICT: an entry added twice is
-- one). An entry added from a row an UPDATE changes at the same time may be
-- stale: the engine re-checks every entry against its row, and moves it.
-- Runs with the caller's rights: the engine calls it as T's owner.
CREATE OR REPLACE FUNCTION ttl.queue_backfill(tbl regclass, batch integer DEFAULT 10000) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $fn$
DECLARE
    s record;
    q ttl.queue;
    after_keys text;
    last jsonb;
    n bigint;
BEGIN
    s := ttl._queue_sql(tbl);
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    IF q.backfilled THEN
        RETURN 0;
    END IF;
    after_keys := CASE WHEN q.backfill_after IS NULL THEN 'true' ELSE format('(%s) OPERATOR(pg_catalog.>) (%s)',
        array_to_string(s.keys, ', '),
        (SELECT string_agg(format('(%L::pg_catalog.jsonb OPERATOR(pg_catalog.->>) %s)::%s', q.backfill_after, i - 1, s.types[i]), ', ')
           FROM generate_subscripts(s.keys, 1) i)) END;
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE format('WITH b AS (SELECT %2$s AS shard, %3$s AS expires_at, %4$s FROM %5$s WHERE %6$s ORDER BY %7$s LIMIT %8$s),'
                   ' i AS (INSERT INTO %1$s (shard, expires_at, %9$s) SELECT shard, expires_at, %9$s FROM b'
                   '       WHERE expires_at IS NOT NULL ON CONFLICT DO NOTHING)'
                   ' SELECT count(*), (SELECT pg_catalog.jsonb_build_array(%9$s) FROM b ORDER BY %10$s LIMIT 1) FROM b',
                   s.qname, s.shard, s.expiry,
                   (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i),
                   s.src, after_keys, array_to_string(s.keys, ', '), batch, array_to_string(s.ks, ', '),
                   (SELECT string_agg(s.ks[i] || ' DESC', ', ') FROM generate_subscripts(s.ks, 1) i))
       INTO n, last;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    UPDATE ttl.queue SET backfill_after = coalesce(last, backfill_after), backfilled = (n < batch) WHERE relid = tbl;
    RETURN n;
END
$fn$;

-- Earlier versions built these statements shard by shard, one function each.
DROP FUNCTION IF EXISTS ttl.queue_drain_sql(oid, integer, timestamptz);
DROP FUNCTION IF EXISTS ttl.queue_repair_sql(oid, integer);
DROP FUNCTION IF EXISTS ttl.queue_recheck_sql(oid);

-- The statements a pass drains T's queue with at `cutoff`, built once for all
-- its shards (the shard is a parameter, so each batch's plan keeps only that
-- shard's table). Run as T's owner with names resolving as
-- ttl._table_search_path(T) says.
--
-- drain: one batch of shard $3: the first $2 entries after position $1 (a
-- jsonb array [expires_at, k1, ..., kn]; NULL: from the start) whose expiry is
-- at or before the cutoff; their rows, re-checked (ttl.expired_sql) and not
-- locked by the application, are deleted in one statement, and with them the
-- entries read whose row it deleted, found by their position in the shard
-- (ctid: no index probe, no hash). The statement tells the table's DELETE
-- trigger so (pg_ttl.queue_drain, for its transaction), which then does not
-- look for the entries of these rows at their expiry: an entry of a deleted row
-- not read here (a second one, later) is due too, and a later batch removes it
-- as its row is gone. The same statement adds the batch to the counters of unit $5 of run $4 in
-- ttl.run_unit and sets its checkpoint ({"strategy": "queue", "after": the last
-- entry's position}), so a batch, its count and its checkpoint commit together
-- in one round trip. Returns (entries read, rows deleted, the last entry's
-- position).
--
-- repair: the entries of shard $3 in positions ($1, $2] (after a drain batch
-- that left some rows): an entry whose row is gone goes; an entry whose row now
-- expires at another instant (an early one, or one left by a race) is moved to
-- the row's expiry, in its shard. The rows whose entries move are locked (FOR
-- SHARE) while their expiry is read, so that an UPDATE cannot make the expiry
-- earlier between the read and the commit (its trigger would find the entry it
-- moves not yet moved); rows the application holds are skipped and keep their
-- entries for the next pass, as do rows the drain left because they are held.
-- Returns the entries removed and their keys (a jsonb array of [k1, ..., kn]).
--
-- recheck: run after a repair, in its transaction but with a new snapshot: the
-- rows with a key whose entry the repair removed as its row was gone ($1, the
-- keys it returned) that exist now get an entry at their expiry in shard $2. A
-- row inserted meanwhile whose INSERT found that very entry there kept it
-- locked (see ttl._queue_trigger_body): the repair waited for it, and this
-- statement sees the row. Returns nothing.
--
-- An entry is always in its key's shard: moved and re-added entries stay in
-- the shard being drained, so no key is hashed here.
CREATE OR REPLACE FUNCTION ttl.queue_drain_sql(tbl oid, cutoff timestamptz,
                                               OUT drain text, OUT repair text, OUT recheck text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    expired text;
    qks text;
    bks text;
    keys text;
    ks text;
    doomed text;
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    s := ttl._queue_parts(tbl);
    SELECT e.expired INTO expired FROM ttl.expired_sql(tbl, cutoff) e;
    qks := (SELECT string_agg('q.' || k, ', ') FROM unnest(s.ks) k);
    bks := (SELECT string_agg('b.' || k, ', ') FROM unnest(s.ks) k);
    keys := array_to_string(s.keys, ', ');
    ks := array_to_string(s.ks, ', ');
    -- A table's rows are found again by ctid; a partitioned table's by key
    -- (a ctid is only unique within one partition).
    doomed := CASE WHEN s.parted
        THEN format('(%1$s) IN (SELECT %1$s FROM %2$s WHERE (%1$s) IN (SELECT %3$s FROM b) AND %4$s FOR UPDATE SKIP LOCKED)',
                    keys, s.src, ks, expired)
        ELSE format('ctid OPERATOR(pg_catalog.=) ANY(ARRAY(SELECT ctid FROM %1$s WHERE (%2$s) IN (SELECT %3$s FROM b)'
                    ' AND %4$s FOR UPDATE SKIP LOCKED))', s.src, keys, ks, expired) END;
    drain := format(
        'WITH b AS (SELECT q.expires_at, %1$s, q.ctid AS pg_ttl_entry FROM %2$s q'
        '            WHERE q.shard OPERATOR(pg_catalog.=) $3::pg_catalog.int2'
        '              AND q.expires_at OPERATOR(pg_catalog.<=) %3$L::pg_catalog.timestamptz'
        '              AND ($1::pg_catalog.jsonb IS NULL OR (q.expires_at, %1$s) OPERATOR(pg_catalog.>) (%4$s))'
        '            ORDER BY q.expires_at, %1$s LIMIT $2),'
        ' d AS (DELETE FROM %5$s WHERE %6$s AND %7$s RETURNING %8$s, %9$s AS pg_ttl_expiry),'
        ' e AS (DELETE FROM %2$s q WHERE q.shard OPERATOR(pg_catalog.=) $3::pg_catalog.int2'
        '         AND q.ctid OPERATOR(pg_catalog.=) ANY(ARRAY(SELECT b.pg_ttl_entry FROM b JOIN d ON (%10$s) = (%11$s)))),'
        ' n AS (SELECT (SELECT pg_catalog.count(*) FROM b) AS selected, (SELECT pg_catalog.count(*) FROM d) AS deleted,'
        '              (SELECT pg_catalog.jsonb_build_array(b.expires_at, %10$s) FROM b'
        '                ORDER BY b.expires_at DESC, %12$s LIMIT 1) AS last),'
        ' a AS (UPDATE ttl.run_unit u SET rows_selected = u.rows_selected OPERATOR(pg_catalog.+) n.selected,'
        '              rows_deleted = u.rows_deleted OPERATOR(pg_catalog.+) n.deleted,'
        '              checkpoint = pg_catalog.jsonb_build_object(''strategy'', ''queue'', ''after'', n.last)'
        '         FROM n WHERE u.run_id OPERATOR(pg_catalog.=) $4::pg_catalog.int8'
        '          AND u.unit_relid OPERATOR(pg_catalog.=) $5::pg_catalog.oid AND n.selected OPERATOR(pg_catalog.>) 0)'
        ' SELECT n.selected, n.deleted, n.last,'
        '        pg_catalog.set_config(''pg_ttl.queue_drain'', %13$L, true) IS NOT NULL FROM n',
        qks, s.qname, cutoff, ttl._queue_pos_sql(s.types, 1), s.src, doomed, expired, keys, s.expiry, bks,
        (SELECT string_agg('d.' || k, ', ') FROM unnest(s.keys) k),
        (SELECT string_agg('b.' || k || ' DESC', ', ') FROM unnest(s.ks) k), tbl::text);
    repair := format(
        'WITH ent AS (SELECT q.expires_at, %2$s FROM %1$s q WHERE q.shard OPERATOR(pg_catalog.=) $3::pg_catalog.int2'
        '     AND ($1::pg_catalog.jsonb IS NULL OR (q.expires_at, %2$s) OPERATOR(pg_catalog.>) (%3$s))'
        '     AND (q.expires_at, %2$s) OPERATOR(pg_catalog.<=) (%4$s)),'
        ' live AS (SELECT %6$s, %7$s AS pg_ttl_expiry FROM %5$s m WHERE (%6$s) IN (SELECT %8$s FROM ent)'
        '     FOR SHARE OF m SKIP LOCKED),'
        ' gone AS (DELETE FROM %1$s q USING ent WHERE q.shard OPERATOR(pg_catalog.=) $3::pg_catalog.int2'
        '     AND q.expires_at OPERATOR(pg_catalog.=) ent.expires_at'
        '     AND (%2$s) = (%9$s)'
        '     AND (EXISTS (SELECT 1 FROM live l WHERE (%10$s) = (%2$s) AND l.pg_ttl_expiry IS DISTINCT FROM q.expires_at)'
        '          OR NOT EXISTS (SELECT 1 FROM %5$s m WHERE (%6$s) = (%2$s)))'
        '   RETURNING %2$s),'
        ' moved AS (INSERT INTO %1$s (shard, expires_at, %8$s)'
        '   SELECT $3::pg_catalog.int2, pg_ttl_expiry, %11$s FROM live WHERE (%11$s) IN (SELECT * FROM gone)'
        '      AND pg_ttl_expiry IS NOT NULL'
        '   ON CONFLICT DO NOTHING)'
        ' SELECT pg_catalog.count(*), pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(%8$s)) FROM gone',
        s.qname, qks, ttl._queue_pos_sql(s.types, 1), ttl._queue_pos_sql(s.types, 2), s.src,
        (SELECT string_agg('m.' || k, ', ') FROM unnest(s.keys) k), s.expiry, ks,
        (SELECT string_agg('ent.' || k, ', ') FROM unnest(s.ks) k),
        (SELECT string_agg('l.' || k, ', ') FROM unnest(s.keys) k), keys);
    recheck := format(
        'INSERT INTO %1$s (shard, expires_at, %2$s)'
        ' SELECT $2::pg_catalog.int2, %3$s, %4$s FROM %5$s'
        '  WHERE (%4$s) IN (SELECT %6$s FROM pg_catalog.jsonb_array_elements($1) g(k))'
        '    AND %3$s IS NOT NULL ON CONFLICT DO NOTHING',
        s.qname, ks, s.expiry, keys, s.src,
        (SELECT string_agg(format('(g.k OPERATOR(pg_catalog.->>) %s)::%s', i - 1, s.types[i]), ', ')
           FROM generate_subscripts(s.types, 1) i));
END
$fn$;

-- The statement giving the expiry of the oldest row of shard `shard` expired at
-- `cutoff` (the lag metric): the rows of its first 1,000 due entries are
-- re-checked (entries may be early: their rows may expire later); when there
-- are more, the last one read bounds the answer (any row with a later entry
-- expires after it), so the lag is never under-stated.
CREATE OR REPLACE FUNCTION ttl.queue_oldest_sql(tbl oid, shard integer, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    expired text;
BEGIN
    s := ttl._queue_parts(tbl);
    SELECT e.expired INTO expired FROM ttl.expired_sql(tbl, cutoff) e;
    RETURN format(
        'WITH e AS (SELECT q.expires_at, %1$s FROM ONLY %2$s q WHERE q.shard OPERATOR(pg_catalog.=) %3$s'
        '             AND q.expires_at OPERATOR(pg_catalog.<=) %4$L::pg_catalog.timestamptz'
        '           ORDER BY q.expires_at, %1$s LIMIT 1000)'
        ' SELECT LEAST((SELECT pg_catalog.min(%5$s) FROM %6$s WHERE (%7$s) IN (SELECT %8$s FROM e) AND %9$s),'
        '        CASE WHEN (SELECT pg_catalog.count(*) FROM e) OPERATOR(pg_catalog.=) 1000'
        '             THEN (SELECT pg_catalog.max(e.expires_at) FROM e) END)',
        (SELECT string_agg('q.' || k, ', ') FROM unnest(s.ks) k),
        format('ttl.%I', format('%s_%s', (SELECT relname FROM pg_class c JOIN ttl.queue q2 ON q2.queue_relid = c.oid
                                           WHERE q2.relid = tbl), shard)),
        shard, cutoff, s.expiry, s.src, array_to_string(s.keys, ', '), array_to_string(s.ks, ', '), expired);
END
$fn$;

-- Compare T's queue with T. Every row with an expiry needs an entry at or
-- before it (an early entry is fine: the drain moves it): rows without any
-- entry are `missing`, rows whose entries are all later than their expiry are
-- `late` (they would expire late); both are wrong. Entries no row needs (their
-- row is gone or never expires, or it has an earlier one) are `extra`: they
-- cost a little space and the drain removes them when they are due. repair =>
-- the queue made exact (one entry per row, at its expiry), online. A queue
-- still being filled has missing entries by design: they count once it is filled.
CREATE OR REPLACE FUNCTION ttl.queue_verify(tbl regclass, repair boolean DEFAULT false,
                                            OUT missing bigint, OUT late bigint, OUT extra bigint, OUT repaired boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
AS $fn$
DECLARE
    s record;
    q ttl.queue;
    keys_q text;
    entries text;
    joined text;
    fine bigint;
    removed jsonb;
BEGIN
    s := ttl._queue_sql(tbl);
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    keys_q := array_to_string(s.ks, ', ');
    entries := format('SELECT %s AS shard, %s AS expires_at, %s FROM %s WHERE %s IS NOT NULL', s.shard, s.expiry,
                      (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i),
                      s.src, s.expiry);
    joined := (SELECT string_agg(format('f.%1$s = r.%1$s', k), ' AND ') FROM unnest(s.ks) k);
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    EXECUTE format('SELECT count(*) FILTER (WHERE f.first IS NULL), count(*) FILTER (WHERE f.first > r.expires_at),'
                   '       count(*) FILTER (WHERE f.first <= r.expires_at), (SELECT count(*) FROM %1$s)'
                   '  FROM (%2$s) r LEFT JOIN (SELECT shard, %3$s, min(expires_at) AS first FROM %1$s GROUP BY shard, %3$s) f'
                   '    ON f.shard = r.shard AND %4$s', s.qname, entries, keys_q, joined)
       INTO missing, late, fine, extra;
    extra := extra - fine;
    IF NOT q.backfilled THEN
        missing := 0;
    END IF;
    repaired := repair AND (missing > 0 OR late > 0 OR extra > 0);
    IF repaired THEN
        -- Every entry not at its row's expiry goes (the keys of those removed are kept)...
        EXECUTE format('WITH gone AS (DELETE FROM %1$s q USING (SELECT shard, expires_at, %2$s FROM %1$s EXCEPT %3$s) o'
                       '   WHERE q.shard = o.shard AND q.expires_at = o.expires_at AND (%4$s) = (%5$s) RETURNING %4$s)'
                       ' SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(%2$s)) FROM gone',
                       s.qname, keys_q, entries,
                       (SELECT string_agg('q.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
                       (SELECT string_agg('o.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i))
           INTO removed;
        -- ...then, in a statement of its own (a new snapshot: an UPDATE that held a
        -- removed entry locked, moving its row's expiry onto it, has committed), each
        -- row gets its entry at its expiry: every row, once the queue is filled; while
        -- it is being filled, the rows whose entries went (a row the fill has passed
        -- would otherwise be left with none).
        IF q.backfilled THEN
            EXECUTE format('INSERT INTO %s (shard, expires_at, %s) %s ON CONFLICT DO NOTHING', s.qname, keys_q, entries);
        ELSIF removed IS NOT NULL THEN
            EXECUTE format('INSERT INTO %s (shard, expires_at, %s) SELECT * FROM (%s) e'
                           ' WHERE (%s) IN (SELECT %s FROM pg_catalog.jsonb_array_elements($1) g(k))'
                           ' ON CONFLICT DO NOTHING', s.qname, keys_q, entries,
                           (SELECT string_agg('e.' || k, ', ') FROM unnest(s.ks) k),
                           (SELECT string_agg(format('(g.k OPERATOR(pg_catalog.->>) %s)::%s', i - 1, s.types[i]), ', ')
                              FROM generate_subscripts(s.types, 1) i))
              USING removed;
        END IF;
    END IF;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
END
$fn$;

-- pg_ttl upgraded: the triggers of existing queues are written anew from this
-- version's definitions (their entries stay valid).
DO $do$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT q.relid FROM ttl.queue q JOIN pg_class c ON c.oid = q.relid LOOP
        PERFORM ttl._queue_triggers(r.relid, true);
    END LOOP;
END
$do$;
