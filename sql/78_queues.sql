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
     WHERE i.indrelid = tbl AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
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
-- costs more per statement.
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
              (SELECT format('%I.%I(%s%I::%s)', pn.nspname, pp.proname, prefix, a.attname, oc.opcintype::regtype)
                 FROM pg_opclass oc
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
-- without a queue).
--   keys:  T's key columns, quoted, in order ("id", "region")
--   ks:    the queue's own names for them (k1, k2)
--   types: their types, as SQL
--   expiry: when a row expires, over T's columns (ttl._row_expiry_sql)
--   shard:  the shard of a row, over T's key columns
CREATE OR REPLACE FUNCTION ttl._queue_sql(tbl oid, OUT qname text, OUT keys text[], OUT ks text[], OUT types text[],
                                          OUT expiry text, OUT shard text, OUT shards integer)
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
    qname := format('%I.%I', 'ttl', (SELECT relname FROM pg_class WHERE oid = q.queue_relid));
    SELECT array_agg(format('%I', a.attname) ORDER BY k.ord), array_agg(format('k%s', k.ord) ORDER BY k.ord),
           array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord)
      INTO keys, ks, types
      FROM unnest(q.key_attnums) WITH ORDINALITY k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum;
    expiry := ttl._row_expiry_sql(p);
    shards := q.shards;
    shard := ttl._queue_shard_sql(tbl, q.key_attnums, '', q.shards);
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

-- Drop T's queue: its triggers, its trigger function and its tables.
CREATE OR REPLACE FUNCTION ttl._queue_drop(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    q ttl.queue;
    t text;
BEGIN
    -- The record first: dropping the queue table fires the event trigger again.
    DELETE FROM ttl.queue WHERE relid = tbl RETURNING * INTO q;
    IF q.relid IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN
        FOREACH t IN ARRAY ARRAY['ttl_queue_insert', 'ttl_queue_update', 'ttl_queue_delete', 'ttl_queue_truncate'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', t, tbl::regclass);
        END LOOP;
    END IF;
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
-- again, when either changed). SECURITY DEFINER: the queue lives in pg_ttl's
-- schema; it acts only on what the policy row says, and only T's owners can
-- write that row (row security on ttl.policy).
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
    fn text := format('queue_%s_sync', tbl);
    move_fn text := format('queue_%s_move', tbl);
    f text;
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
    IF p.relid IS NULL OR p.queue_shards = 0 OR q.relid IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT c2.relname, c2.relkind, c2.relowner, n.nspname INTO c
      FROM pg_class c2 JOIN pg_namespace n ON n.oid = c2.relnamespace WHERE c2.oid = tbl;
    IF c.relkind <> 'r' THEN
        RAISE EXCEPTION 'table % is partitioned: "ttl_queue_shards" is not supported on partitioned tables yet', tbl::regclass
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Range partitions on the TTL column are dropped whole; other partitions are swept by block ranges.';
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
    EXECUTE format(
        'CREATE FUNCTION ttl.%I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
        ' SET search_path = pg_catalog, %I, pg_temp AS %L',
        fn, c.nspname, ttl._queue_trigger_body(tbl));
    EXECUTE format(
        'CREATE FUNCTION ttl.%I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
        ' SET search_path = pg_catalog, %I, pg_temp SET plan_cache_mode = force_generic_plan AS %L',
        move_fn, c.nspname, ttl._queue_move_body(tbl));
    FOREACH f IN ARRAY ARRAY[fn, move_fn] LOOP
        EXECUTE format('ALTER FUNCTION ttl.%I() OWNER TO %I', f, pg_get_userbyid(c.relowner));
        EXECUTE format('REVOKE ALL ON FUNCTION ttl.%I() FROM PUBLIC', f);
    END LOOP;
    EXECUTE format('CREATE TRIGGER ttl_queue_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()', tbl::regclass, fn);
    EXECUTE format('CREATE TRIGGER ttl_queue_update AFTER UPDATE ON %s FOR EACH ROW WHEN (%s)'
                   ' EXECUTE FUNCTION ttl.%I()', tbl::regclass, ttl._queue_changed_sql(tbl), move_fn);
    EXECUTE format('CREATE TRIGGER ttl_queue_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()', tbl::regclass, fn);
    EXECUTE format('CREATE TRIGGER ttl_queue_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION ttl.%I()',
                   tbl::regclass, fn);
    RAISE NOTICE 'table % has an expiration queue of % shards (%); existing rows are added to it by the next pass (or SELECT ttl.queue_backfill(%))',
        tbl::regclass, p.queue_shards, parent, quote_literal(tbl::regclass::text);
END
$fn$;

-- The body of T's statement-level trigger function: entries as sets of
-- (shard, expiry, key) from the transition tables.
CREATE OR REPLACE FUNCTION ttl._queue_trigger_body(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    keysel text;
    ks text;
    match text;
BEGIN
    s := ttl._queue_sql(tbl);
    ks := array_to_string(s.ks, ', ');
    keysel := (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i);
    match := format('q.shard = o.shard AND q.expires_at = o.expires_at AND (%s) = (%s)',
                    (SELECT string_agg('q.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
                    (SELECT string_agg('o.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i));
    RETURN format($body$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO %1$s (shard, expires_at, %2$s)
        SELECT * FROM (%3$s) n WHERE n.expires_at IS NOT NULL ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM %1$s q USING (%4$s) o WHERE %6$s;
    ELSE
        TRUNCATE %1$s;
        UPDATE ttl.queue SET backfill_after = NULL, backfilled = true WHERE relid = %5$s;
    END IF;
    RETURN NULL;
END
$body$, s.qname, ks, format('SELECT %s AS shard, %s AS expires_at, %s FROM new_rows', s.shard, s.expiry, keysel),
        format('SELECT %s AS shard, %s AS expires_at, %s FROM old_rows', s.shard, s.expiry, keysel), tbl, match);
END
$fn$;

-- When an UPDATE may move a row's entry (the row trigger's WHEN clause): its
-- expiry column or key changed. An expression policy may read any column:
-- then any change. No function call: the condition runs as whoever updates.
CREATE OR REPLACE FUNCTION ttl._queue_changed_sql(tbl oid) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    q ttl.queue;
    cols text[];
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    IF p.ttl_attnum IS NULL AND p.row_expiry_attnum IS NULL THEN
        RETURN 'OLD.* IS DISTINCT FROM NEW.*';
    END IF;
    SELECT array_agg(format('%I', a.attname) ORDER BY a.attnum) INTO cols
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND (a.attnum = ANY (q.key_attnums) OR a.attnum = coalesce(p.ttl_attnum, p.row_expiry_attnum));
    RETURN format('(%s) IS DISTINCT FROM (%s)',
                  (SELECT string_agg('OLD.' || c, ', ') FROM unnest(cols) c),
                  (SELECT string_agg('NEW.' || c, ', ') FROM unnest(cols) c));
END
$fn$;

-- The body of T's row-level UPDATE trigger function: the old entry goes
-- unless a row of the table has that key at that expiry now (AFTER row
-- triggers fire once the whole statement is done: rows that swapped keys keep
-- their entries; a row whose key did not change cannot have lost it to
-- another), the new one is added. For a TTL column (or per-row expiry) the
-- expiry and the shard are plain expressions over OLD and NEW (no query);
-- an expression policy's expression is read over the row in a query. Its
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
    old_e text;
    new_e text;
    old_k text;
    new_k text;
BEGIN
    s := ttl._queue_sql(tbl);
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    old_k := (SELECT string_agg('OLD.' || k, ', ') FROM unnest(s.keys) k);
    new_k := (SELECT string_agg('NEW.' || k, ', ') FROM unnest(s.keys) k);
    IF p.row_expiry_attnum IS NOT NULL THEN
        old_e := format('pg_ttl_old_expiry := OLD.%I;', ttl._attname(tbl, p.row_expiry_attnum));
        new_e := format('pg_ttl_new_expiry := NEW.%I;', ttl._attname(tbl, p.row_expiry_attnum));
    ELSIF p.ttl_attnum IS NOT NULL THEN
        old_e := format('pg_ttl_old_expiry := %s;', ttl._expiry_sql(p.ttl_atttypid, p.unit, p.expire_after,
                                                                     format('OLD.%I', ttl._attname(tbl, p.ttl_attnum))));
        new_e := format('pg_ttl_new_expiry := %s;', ttl._expiry_sql(p.ttl_atttypid, p.unit, p.expire_after,
                                                                     format('NEW.%I', ttl._attname(tbl, p.ttl_attnum))));
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
    IF pg_ttl_old_expiry IS NOT NULL AND ((%4$s) IS NOT DISTINCT FROM (%5$s) OR NOT EXISTS (
           SELECT 1 FROM ONLY %6$s m WHERE (%7$s) = (%4$s) AND %8$s = pg_ttl_old_expiry)) THEN
        DELETE FROM %1$s q WHERE q.shard = %9$s AND q.expires_at = pg_ttl_old_expiry AND (%10$s) = (%4$s);
    END IF;
    IF pg_ttl_new_expiry IS NOT NULL THEN
        INSERT INTO %1$s (shard, expires_at, %11$s) VALUES (%12$s, pg_ttl_new_expiry, %5$s) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$body$, s.qname, old_e, new_e, old_k, new_k, tbl::regclass,
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
    EXECUTE format('WITH b AS (SELECT %2$s AS shard, %3$s AS expires_at, %4$s FROM ONLY %5$s WHERE %6$s ORDER BY %7$s LIMIT %8$s),'
                   ' i AS (INSERT INTO %1$s (shard, expires_at, %9$s) SELECT shard, expires_at, %9$s FROM b'
                   '       WHERE expires_at IS NOT NULL ON CONFLICT DO NOTHING)'
                   ' SELECT count(*), (SELECT pg_catalog.jsonb_build_array(%9$s) FROM b ORDER BY %10$s LIMIT 1) FROM b',
                   s.qname, s.shard, s.expiry,
                   (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i),
                   tbl, after_keys, array_to_string(s.keys, ', '), batch, array_to_string(s.ks, ', '),
                   (SELECT string_agg(s.ks[i] || ' DESC', ', ') FROM generate_subscripts(s.ks, 1) i))
       INTO n, last;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    UPDATE ttl.queue SET backfill_after = coalesce(last, backfill_after), backfilled = (n < batch) WHERE relid = tbl;
    RETURN n;
END
$fn$;

-- The statement that drains one batch of shard `shard` of T's queue at
-- `cutoff`: the first $2 entries after position $1 (a jsonb array
-- [expires_at, k1, ..., kn]; NULL: from the start) whose expiry is at or
-- before the cutoff; their rows, re-checked (ttl.expired_sql) and not locked by
-- the application, are deleted (the DELETE trigger removes their entries).
-- Returns (entries read, rows deleted, the last entry's position).
-- Run as T's owner with names resolving as ttl._table_search_path(T) says.
CREATE OR REPLACE FUNCTION ttl.queue_drain_sql(tbl oid, shard integer, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    expired text;
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    s := ttl._queue_sql(tbl);
    SELECT e.expired INTO expired FROM ttl.expired_sql(tbl, cutoff) e;
    RETURN format(
        'WITH b AS (SELECT q.expires_at, %1$s FROM ONLY %2$s q'
        '            WHERE q.shard OPERATOR(pg_catalog.=) %3$s AND q.expires_at OPERATOR(pg_catalog.<=) %4$L::pg_catalog.timestamptz'
        '              AND ($1::pg_catalog.jsonb IS NULL OR (q.expires_at, %1$s) OPERATOR(pg_catalog.>) (%5$s))'
        '            ORDER BY q.expires_at, %1$s LIMIT $2),'
        ' d AS (DELETE FROM ONLY %6$s WHERE ctid OPERATOR(pg_catalog.=) ANY(ARRAY('
        '           SELECT ctid FROM ONLY %6$s WHERE (%7$s) IN (SELECT %8$s FROM b) AND %9$s FOR UPDATE SKIP LOCKED))'
        '         AND %9$s RETURNING 1)'
        ' SELECT (SELECT count(*) FROM b), (SELECT count(*) FROM d),'
        '        (SELECT pg_catalog.jsonb_build_array(b.expires_at, %10$s) FROM b ORDER BY b.expires_at DESC, %11$s LIMIT 1)',
        (SELECT string_agg('q.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
        format('ttl.%I', format('%s_%s', (SELECT relname FROM pg_class c JOIN ttl.queue q2 ON q2.queue_relid = c.oid
                                           WHERE q2.relid = tbl), shard)),
        shard, cutoff, ttl._queue_pos_sql(s.types, 1),
        tbl::regclass, array_to_string(s.keys, ', '), array_to_string(s.ks, ', '), expired,
        (SELECT string_agg('b.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
        (SELECT string_agg('b.' || s.ks[i] || ' DESC', ', ') FROM generate_subscripts(s.ks, 1) i));
END
$fn$;

-- The statement that repairs the entries of shard `shard` in positions
-- ($1, $2] (after a drain batch): an entry whose row is gone goes; an entry
-- whose row now expires at another instant (a stale entry) is moved to the
-- row's expiry. Rows deleted by the drain took their entries with them; rows
-- the application held keep theirs for the next pass. Returns the entries
-- removed.
CREATE OR REPLACE FUNCTION ttl.queue_repair_sql(tbl oid, shard integer) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
BEGIN
    s := ttl._queue_sql(tbl);
    RETURN format(
        'WITH gone AS (DELETE FROM %1$s q WHERE q.shard OPERATOR(pg_catalog.=) %2$s'
        '     AND ($1::pg_catalog.jsonb IS NULL OR (q.expires_at, %3$s) OPERATOR(pg_catalog.>) (%4$s))'
        '     AND (q.expires_at, %3$s) OPERATOR(pg_catalog.<=) (%5$s)'
        '     AND NOT EXISTS (SELECT 1 FROM ONLY %6$s m WHERE (%7$s) = (%3$s) AND %8$s OPERATOR(pg_catalog.=) q.expires_at)'
        '   RETURNING %3$s),'
        ' moved AS (INSERT INTO %1$s (shard, expires_at, %9$s)'
        '   SELECT %10$s, %8$s, %7$s FROM ONLY %6$s m WHERE (%7$s) IN (SELECT %9$s FROM gone) AND %8$s IS NOT NULL'
        '   ON CONFLICT DO NOTHING)'
        ' SELECT count(*) FROM gone',
        s.qname, shard, (SELECT string_agg('q.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
        ttl._queue_pos_sql(s.types, 1), ttl._queue_pos_sql(s.types, 2), tbl::regclass,
        (SELECT string_agg('m.' || s.keys[i], ', ') FROM generate_subscripts(s.keys, 1) i),
        s.expiry, array_to_string(s.ks, ', '), s.shard);
END
$fn$;

-- Compare T's queue with T: rows without their entry (missing) and entries
-- without their row at that expiry (stale); repair => fix both. A queue still
-- being filled has missing entries by design: only stale ones count then.
CREATE OR REPLACE FUNCTION ttl.queue_verify(tbl regclass, repair boolean DEFAULT false,
                                            OUT missing bigint, OUT stale bigint, OUT repaired boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    q ttl.queue;
    keys_m text;
    keys_q text;
    entries text;
BEGIN
    s := ttl._queue_sql(tbl);
    SELECT * INTO q FROM ttl.queue WHERE relid = tbl;
    keys_q := array_to_string(s.ks, ', ');
    entries := format('SELECT %s AS shard, %s AS expires_at, %s FROM ONLY %s WHERE %s IS NOT NULL', s.shard, s.expiry,
                      (SELECT string_agg(format('%s AS %s', s.keys[i], s.ks[i]), ', ') FROM generate_subscripts(s.keys, 1) i),
                      tbl, s.expiry);
    PERFORM set_config('search_path', ttl._table_search_path(tbl), true);
    IF q.backfilled THEN
        EXECUTE format('SELECT count(*) FROM (%s EXCEPT SELECT shard, expires_at, %s FROM %s) x', entries, keys_q, s.qname)
           INTO missing;
    ELSE
        missing := 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT shard, expires_at, %s FROM %s EXCEPT %s) x', keys_q, s.qname, entries)
       INTO stale;
    repaired := repair AND (missing > 0 OR stale > 0);
    IF repaired THEN
        EXECUTE format('DELETE FROM %1$s q USING (SELECT shard, expires_at, %2$s FROM %1$s EXCEPT %3$s) o'
                       ' WHERE q.shard = o.shard AND q.expires_at = o.expires_at AND (%4$s) = (%5$s)',
                       s.qname, keys_q, entries,
                       (SELECT string_agg('q.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i),
                       (SELECT string_agg('o.' || s.ks[i], ', ') FROM generate_subscripts(s.ks, 1) i));
        IF q.backfilled THEN
            EXECUTE format('INSERT INTO %s (shard, expires_at, %s) %s ON CONFLICT DO NOTHING', s.qname, keys_q, entries);
        END IF;
    END IF;
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
END
$fn$;
