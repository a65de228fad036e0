-- Tiers: a table's expiring rows are first moved to storage (Parquet files),
-- then deleted. Tier k fires at the TTL column + its `after`; the final DELETE
-- is the policy's own expire_after. A row moves to the last tier it has
-- reached: a row already past the next tier is that tier's, and a row already
-- past the DELETE is deleted without being archived, unless the DELETE entry
-- says "archive_before_delete": then the last storage tier takes it too
-- (archived, then deleted; ttl.tier.archive_before_delete on that tier).
--
--   SELECT ttl.create_storage('local', 'file:///var/lib/pg-ttl/archive');
--   SELECT ttl.set_tiers('events', '[{"after": "30 days", "to": "local"},
--                                    {"after": "400 days", "action": "delete", "archive_before_delete": true}]');
--
-- The engine (pg_ttl/expire/tiers/) writes, verifies and records each batch
-- in ttl.archive, deleting its rows in the same short transaction; a range
-- partition whose every row reached a storage tier (ttl.partition_tier) is
-- exported whole and dropped or detached in the transaction that lists it.

-- A storage: its name and URL.
--   file:///absolute/directory                       a directory where the engine runs
--   s3://bucket[/prefix][?endpoint=URL&region=NAME]  S3 or an S3-compatible store
--   postgresql://user@host:port/db?schema=archive  a table of the same shape there
-- Credentials are never stored here: the engine uses the standard AWS
-- variables or profile of its environment, libpq's PGPASSWORD or ~/.pgpass.
CREATE OR REPLACE FUNCTION ttl.create_storage(name text, url text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    scheme text := lower(substring(url FROM '^([A-Za-z][A-Za-z0-9+.-]*)://'));
    unknown text;
BEGIN
    IF name IS NULL OR name !~ '^[A-Za-z_][A-Za-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid storage name "%"', name USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Letters, digits, _ and -, starting with a letter or _ (at most 63).';
    END IF;
    IF scheme IN ('postgresql', 'postgres') THEN
        IF url ~ '^postgres(ql)?://[^/@]*:[^/@]*@' OR url ~* '[?&]password=' THEN
            RAISE EXCEPTION 'storage "%": credentials are never stored in the catalog', name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Give the worker the password in PGPASSWORD or ~/.pgpass (libpq''s usual places).';
        END IF;
    ELSIF scheme = 's3' THEN
        IF url ~* '[?&](access_key|secret|secret_key|session_token|password)=' OR url ~ '^s3://[^/?]*@' THEN
            RAISE EXCEPTION 'storage "%": credentials are never stored in the catalog', name
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Give the worker AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an AWS profile) in its environment.';
        END IF;
        IF url !~ '^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^?]*)?(\?([a-z_]+=[^&]*)(&[a-z_]+=[^&]*)*)?$' THEN
            RAISE EXCEPTION 'storage "%": invalid URL "%"', name, url USING ERRCODE = 'invalid_parameter_value',
                HINT = 's3://bucket/prefix?endpoint=http://host:port&region=us-east-1 (endpoint and region optional).';
        END IF;
        SELECT string_agg(DISTINCT m[1], ', ') INTO unknown
          FROM regexp_matches(url, '[?&]([a-z_]+)=', 'g') m
         WHERE m[1] NOT IN ('endpoint', 'region', 'credentials_file', 'profile');
        IF unknown IS NOT NULL THEN
            RAISE EXCEPTION 'storage "%": unknown setting % in "%"', name, unknown, url
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'An S3 storage takes endpoint, region, credentials_file (an AWS credentials file on the engine''s machine) and profile.';
        END IF;
    ELSIF scheme IS DISTINCT FROM 'file' OR url !~ '^file:///.' THEN
        RAISE EXCEPTION 'storage "%": invalid URL "%"', name, url USING ERRCODE = 'invalid_parameter_value',
            HINT = 'A directory (file:///absolute/path), S3 (s3://bucket/prefix?endpoint=...&region=...) or PostgreSQL (postgresql://user@host/db?schema=archive).';
    END IF;
    IF EXISTS (SELECT 1 FROM ttl.storage s WHERE s.name = create_storage.name) THEN
        RAISE EXCEPTION 'storage "%" already exists', name USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO ttl.storage (name, url) VALUES (name, url);
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

-- Drop a storage no tier uses and no archived object lives in.
CREATE OR REPLACE FUNCTION ttl.drop_storage(name text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ttl.storage s WHERE s.name = drop_storage.name) THEN
        RAISE EXCEPTION 'storage "%" does not exist', name USING ERRCODE = 'undefined_object';
    END IF;
    IF EXISTS (SELECT 1 FROM ttl.tier t WHERE t.storage = drop_storage.name) THEN
        RAISE EXCEPTION 'storage "%" is used by the tiers of %', name,
            (SELECT string_agg(DISTINCT t.relid::regclass::text, ', ') FROM ttl.tier t WHERE t.storage = drop_storage.name)
            USING ERRCODE = 'dependent_objects_still_exist', HINT = 'Change those tiers first (ttl.set_tiers).';
    END IF;
    IF EXISTS (SELECT 1 FROM ttl.archive a WHERE a.storage = drop_storage.name) THEN
        RAISE EXCEPTION 'storage "%" holds archived rows (pg-ttl archive list)', name
            USING ERRCODE = 'dependent_objects_still_exist';
    END IF;
    DELETE FROM ttl.storage s WHERE s.name = drop_storage.name;
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

-- Set a table's tiers (replacing them): a JSON array of {"after": interval,
-- "to": storage} in increasing `after`, optionally ending with {"after":
-- interval, "action": "delete"}, which sets the policy's expire_after; without
-- it, the policy's expire_after is the final DELETE. The DELETE entry may add
-- "archive_before_delete": true: rows already past the DELETE are then archived
-- to the last storage tier before they are deleted. '[]' removes the tiers.
-- Tiers count from the TTL column (ttl_column). Any other key is refused.
CREATE OR REPLACE FUNCTION ttl.set_tiers(tbl regclass, tiers jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e_state text; e_message text; e_detail text; e_hint text;  -- for the error handler
    p ttl.policy;
    t jsonb;
    i integer := 0;
    n integer;
    after interval;
    prev interval;
    final interval;
    unknown text;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % has no TTL policy', tbl USING ERRCODE = 'undefined_object',
            HINT = 'Enable TTL first: tiers extend it (ttl.enable).';
    END IF;
    IF p.ttl_attnum IS NULL THEN
        RAISE EXCEPTION 'table %: tiers count from a TTL column, and this policy has none', tbl
            USING ERRCODE = 'feature_not_supported', HINT = 'Set "ttl_column" (ttl.enable(..., column_name => ...)).';
    END IF;
    IF jsonb_typeof(tiers) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'tiers of %: a JSON array is expected, got %', tbl, coalesce(tiers::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := jsonb_array_length(tiers);
    DELETE FROM ttl.tier WHERE relid = tbl;
    FOR t IN SELECT value FROM jsonb_array_elements(tiers) LOOP
        i := i + 1;
        IF jsonb_typeof(t) IS DISTINCT FROM 'object' OR NOT t ? 'after' THEN
            RAISE EXCEPTION 'tier % of %: {"after": interval, "to": storage} or {"after": interval, "action": "delete"} expected, got %',
                i, tbl, t USING ERRCODE = 'invalid_parameter_value';
        END IF;
        unknown := (SELECT string_agg(format('"%s"', k), ', ' ORDER BY k) FROM jsonb_object_keys(t) AS k
                     WHERE k NOT IN ('after', 'to', 'action', 'archive_before_delete'));
        IF unknown IS NOT NULL THEN
            RAISE EXCEPTION 'tier % of %: unknown key %', i, tbl, unknown USING ERRCODE = 'invalid_parameter_value',
                HINT = 'A tier is {"after": interval, "to": storage}; the last may be {"after": interval, "action": "delete"}, with "archive_before_delete": true or false.';
        END IF;
        IF t ? 'archive_before_delete' AND t->>'action' IS DISTINCT FROM 'delete' THEN
            RAISE EXCEPTION 'tier % of %: "archive_before_delete" belongs to the final {"action": "delete"} entry', i, tbl
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'e.g. [{"after": "30 days", "to": "cold"}, {"after": "400 days", "action": "delete", "archive_before_delete": true}]';
        END IF;
        IF t ? 'archive_before_delete' AND jsonb_typeof(t->'archive_before_delete') IS DISTINCT FROM 'boolean' THEN
            RAISE EXCEPTION 'tier % of %: "archive_before_delete" must be true or false, got %', i, tbl,
                t->'archive_before_delete' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF t ? 'to' AND t ? 'action' THEN
            RAISE EXCEPTION 'tier % of %: a tier either moves rows "to" a storage or is the final "action": "delete", not both',
                i, tbl USING ERRCODE = 'invalid_parameter_value';
        END IF;
        after := ttl._to_interval('tier after', t->>'after');
        IF after < interval '0' OR (prev IS NOT NULL AND after <= prev) THEN
            RAISE EXCEPTION 'tier % of %: "after" must increase from one tier to the next, got % after %', i, tbl,
                t->>'after', prev USING ERRCODE = 'invalid_parameter_value';
        END IF;
        prev := after;
        IF t->>'action' = 'delete' THEN
            IF i <> n THEN
                RAISE EXCEPTION 'tier % of %: DELETE must be the last tier', i, tbl USING ERRCODE = 'invalid_parameter_value';
            END IF;
            final := after;
            IF (t->'archive_before_delete') = 'true'::jsonb THEN
                IF i = 1 THEN
                    RAISE EXCEPTION 'tiers of %: "archive_before_delete" needs a storage tier before the DELETE to archive to', tbl
                        USING ERRCODE = 'invalid_parameter_value';
                END IF;
                -- the last storage tier (the one before this entry) takes the rows past the DELETE too
                UPDATE ttl.tier x SET archive_before_delete = true WHERE x.relid = tbl AND x.position = i - 1;
            END IF;
        ELSIF t ? 'action' THEN
            RAISE EXCEPTION 'tier % of %: unknown action "%"', i, tbl, t->>'action'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'A tier moves rows "to" a storage, or is the final "action": "delete".';
        ELSIF NOT EXISTS (SELECT 1 FROM ttl.storage s WHERE s.name = t->>'to') THEN
            RAISE EXCEPTION 'tier % of %: storage "%" does not exist', i, tbl, t->>'to'
                USING ERRCODE = 'undefined_object', HINT = 'Create it first: SELECT ttl.create_storage(name, url).';
        ELSIF (SELECT s.url ~ '^postgres(ql)?://' FROM ttl.storage s WHERE s.name = t->>'to')
              AND NOT EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = tbl AND x.indisprimary) THEN
            RAISE EXCEPTION 'tier % of %: a PostgreSQL storage needs a primary key on the table', i, tbl
                USING ERRCODE = 'invalid_table_definition',
                      HINT = 'Rows are written there once by their key: a batch retried after a crash inserts nothing twice.';
        ELSE
            INSERT INTO ttl.tier (relid, position, after, storage) VALUES (tbl, i, after, t->>'to');
        END IF;
    END LOOP;
    IF final IS NOT NULL THEN
        PERFORM ttl.set_option(tbl, 'expire_after', final::text);
    END IF;
    PERFORM ttl._check_tiers(tbl, coalesce(final, p.expire_after));
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

-- Every storage tier fires before the final DELETE (expire_after).
CREATE OR REPLACE FUNCTION ttl._check_tiers(tbl oid, expire_after interval) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    late record;
BEGIN
    SELECT * INTO late FROM ttl.tier t WHERE t.relid = tbl AND expire_after IS NOT NULL AND t.after >= expire_after
     ORDER BY t.position LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'table %: the tier to "%" fires after %, not before the final DELETE at %', tbl::regclass,
            late.storage, late.after, expire_after USING ERRCODE = 'invalid_parameter_value',
            HINT = 'A row is archived before it is deleted: every tier''s "after" must be shorter than "ttl_expire_after".';
    END IF;
END
$fn$;

-- The rows of T that tier `tier_position` moves at `cutoff`, as SQL over T's
-- columns: reached that tier, not yet the next one (the next storage tier or
-- the final DELETE; the last storage tier of a table whose tiers archive
-- before the DELETE takes the rows past the DELETE too). NULL never fires.
CREATE OR REPLACE FUNCTION ttl.tier_sql(tbl oid, tier_position integer, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    t ttl.tier;
    next_after interval;
    this_tier text;
    next_tier text;
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would move early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    SELECT * INTO t FROM ttl.tier x WHERE x.relid = tbl AND x.position = tier_position;
    IF p.relid IS NULL OR t.relid IS NULL OR p.ttl_attnum IS NULL THEN
        RAISE EXCEPTION 'table % has no tier %', tbl::regclass, tier_position USING ERRCODE = 'undefined_object';
    END IF;
    SELECT x.after INTO next_after FROM ttl.tier x WHERE x.relid = tbl AND x.position > t.position
     ORDER BY x.position LIMIT 1;
    -- reached this tier's `after` (as ttl.expired_sql judges the DELETE: one comparison with a
    -- constant where that is exact), and not the next one's
    SELECT c.reached INTO this_tier FROM ttl._column_reached_sql(p, t.after, cutoff) c;
    IF next_after IS NULL AND t.archive_before_delete THEN
        RETURN this_tier;
    END IF;
    SELECT c.reached INTO next_tier FROM ttl._column_reached_sql(p, coalesce(next_after, p.expire_after), cutoff) c;
    RETURN format('(%s AND NOT %s)', this_tier, next_tier);
END
$fn$;

-- Whole partitions (pg_ttl/expire/tiers/exports.py): a range partition of T on its TTL
-- column whose exclusive upper bound `upper` (text in the column's type) shows
-- that every row in it has reached a storage tier (ttl._bound_reached,
-- sql/15_expiry.sql) is exported whole, then dropped or detached
-- (ttl_partition_action) in the transaction that lists its objects.

--
-- The storage tier a range partition of T with upper bound `upper` is exported
-- to whole at `cutoff`: the last storage tier everything in it has reached.
-- NULL when it has reached none, or when it is past the final DELETE and the
-- tiers do not archive before it (the deletion run drops it).
CREATE OR REPLACE FUNCTION ttl.partition_tier(tbl oid, cutoff timestamptz, upper text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    k integer;
    before_delete boolean;
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would move early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT t.position, t.archive_before_delete INTO k, before_delete FROM ttl.tier t
     WHERE t.relid = tbl AND ttl._bound_reached(tbl, t.after, cutoff, upper)
     ORDER BY t.position DESC LIMIT 1;
    IF k IS NULL OR (NOT before_delete AND coalesce(ttl.partition_expired(tbl, cutoff, upper), false)) THEN
        RETURN NULL;
    END IF;
    RETURN k;
END
$fn$;

-- The rows of a partition exported whole (ttl.partition_tier) that go to
-- storage, as SQL over T's columns: every row, except those already past the
-- final DELETE when the tiers do not archive before it (they go with the
-- partition, unarchived, as the deletion run would delete them).
CREATE OR REPLACE FUNCTION ttl.partition_tier_sql(tbl oid, cutoff timestamptz) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
BEGIN
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): rows would move early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF p.relid IS NULL OR p.ttl_attnum IS NULL THEN
        RAISE EXCEPTION 'table % has no TTL column policy', tbl::regclass USING ERRCODE = 'undefined_object';
    END IF;
    IF p.expire_after IS NULL OR EXISTS (SELECT 1 FROM ttl.tier t WHERE t.relid = tbl AND t.archive_before_delete) THEN
        RETURN 'true';
    END IF;
    -- not past the DELETE, as ttl.expired_sql judges it
    RETURN format('(NOT %s)', (SELECT c.reached FROM ttl._column_reached_sql(p, p.expire_after, cutoff) c));
END
$fn$;

-- The instant of T's TTL column value (for the manifest's time range).
CREATE OR REPLACE FUNCTION ttl.row_time_sql(tbl oid) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- a timestamptz column is its rows' instant itself (the general form adds nothing to it in
    -- UTC): the archive reads it once, as a column, not again as an expression
    SELECT CASE WHEN p.ttl_atttypid = 'pg_catalog.timestamptz'::pg_catalog.regtype
                THEN format('%I', ttl._attname(tbl, p.ttl_attnum))
                ELSE ttl._expiry_sql(p.ttl_atttypid, p.unit, interval '0', format('%I', ttl._attname(tbl, p.ttl_attnum)))
           END
      FROM ttl.policy p WHERE p.relid = tbl AND p.ttl_attnum IS NOT NULL
$fn$;

-- Tiers as TTL DDL spells them, "ttl_tiers = '30 days TO cold, 400 days DELETE'"
-- (or a JSON array as ttl.set_tiers takes it), to ttl.set_tiers's JSON.
CREATE OR REPLACE FUNCTION ttl._tiers_json(spec text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    part text;
    m text[];
    out jsonb := '[]';
BEGIN
    IF btrim(spec) LIKE '[%' THEN
        RETURN spec::jsonb;
    END IF;
    IF btrim(coalesce(spec, '')) = '' THEN
        RETURN out;
    END IF;
    FOREACH part IN ARRAY string_to_array(spec, ',') LOOP
        m := regexp_match(part, '^\s*(.+?)\s+to\s+("[^"]+"|[A-Za-z_][A-Za-z0-9_-]*)\s*$', 'i');
        IF m IS NOT NULL THEN
            out := out || jsonb_build_array(jsonb_build_object('after', m[1], 'to', btrim(m[2], '"')));
            CONTINUE;
        END IF;
        m := regexp_match(part, '^\s*(.+?)\s+delete\s*$', 'i');
        IF m IS NULL THEN
            RAISE EXCEPTION 'value of "ttl_tiers": "%" is neither "<interval> TO <storage>" nor "<interval> DELETE"',
                btrim(part) USING ERRCODE = 'invalid_parameter_value',
                HINT = 'e.g. ttl_tiers = ''30 days TO cold, 400 days DELETE''';
        END IF;
        out := out || jsonb_build_array(jsonb_build_object('after', m[1], 'action', 'delete'));
    END LOOP;
    RETURN out;
END
$fn$;

-- A table's storage tiers as TTL DDL spells them (NULL: none), for ttl.describe and pg-ttl dump:
-- '30 days TO cold' (the final DELETE is ttl_expire_after); with archive_before_delete, which
-- only ttl.set_tiers's JSON spells, that JSON, its DELETE entry included.
CREATE OR REPLACE FUNCTION ttl._tiers_text(tbl oid) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN bool_or(t.archive_before_delete)
                THEN '[' || string_agg(format('{"after": %s, "to": %s}', to_jsonb(t.after::text), to_jsonb(t.storage)),
                                       ', ' ORDER BY t.position)
                     || format(', {"after": %s, "action": "delete", "archive_before_delete": true}]',
                               (SELECT to_jsonb(p.expire_after::text) FROM ttl.policy p WHERE p.relid = tbl))
                ELSE string_agg(format('%s TO %s', t.after, t.storage), ', ' ORDER BY t.position) END
      FROM ttl.tier t WHERE t.relid = tbl
$fn$;
