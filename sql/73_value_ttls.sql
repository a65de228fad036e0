-- CQL-style tables: a TTL per value, as Cassandra, Scylla and YugabyteDB keep it.
--
-- Declared with "ttl_value_ttls" = true on a per-row TTL policy (TTL DDL: CQL's
-- default_time_to_live = <seconds>). Besides the per-row TTL columns
-- (ttl_expires_at: the row marker's expiry, ttl_written_at: when INSERT wrote
-- it) the table gets one jsonb column, ttl_values, holding the values that an
-- UPDATE wrote: {"<attnum>": [write time, expiry], ...} as Unix seconds
-- (expiry null = never). A non-NULL value without an entry was written by the
-- INSERT and shares the marker's write time and expiry; a NULL value has no TTL.
--
-- INSERT costs no trigger: the marker's columns come from DEFAULTs (the
-- statement's USING TTL, else the table default, 0 = never). Each non-key column
-- has a BEFORE UPDATE OF <column> trigger (named ttl_value_<attnum>) that records
-- the write of that value with the statement's USING TTL or the table default;
-- UPDATE never touches the marker. Writing NULL removes the value's entry.
--
-- A value has expired once its own expiry has passed; the row once its marker
-- and every value in it have expired (ttl.latest_expiry below, which is the
-- policy's expiration expression, so deletion, strict visibility and ttl.ttl()
-- all read it). The engine turns expired values into NULL
-- (ttl.null_expired_cells).

-- When a row of a CQL-style table goes: its marker's expiry, or the latest of
-- its values' if later; NULL (never) if the marker or any value never expires.
-- The policy's expression calls it only for rows that have value entries
-- (ttl._managed_expression): most rows cost no call.
CREATE OR REPLACE FUNCTION ttl.latest_expiry(marker timestamptz, cells jsonb) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN marker IS NULL THEN NULL
                WHEN cells IS NULL THEN marker
                ELSE (SELECT CASE WHEN pg_catalog.bool_or(pg_catalog.jsonb_typeof(c.value OPERATOR(pg_catalog.->) 1)
                                                           OPERATOR(pg_catalog.=) 'null')
                                  THEN NULL
                                  ELSE GREATEST(marker, pg_catalog.max(pg_catalog.to_timestamp(
                                           (c.value OPERATOR(pg_catalog.->>) 1)::pg_catalog.float8))) END
                        FROM pg_catalog.jsonb_each(cells) AS c) END
$fn$;


-- The marker column's DEFAULT on a CQL-style table: the statement's USING TTL
-- when there is one (0: never), else the table default (0: never). Inline SQL
-- for the usual write, as ttl._expiry_default_sql, so that INSERT stays cheap.
CREATE OR REPLACE FUNCTION ttl._marker_default_sql(default_ttl interval) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format(
        $f$CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL
                     THEN %1$s
                ELSE ttl.row_expires_at('0'::interval, true) END$f$,
        CASE WHEN default_ttl IS NULL OR default_ttl = interval '0' THEN 'NULL::pg_catalog.timestamptz'
             ELSE format('pg_catalog.timezone(''UTC''::text, pg_catalog.timezone(''UTC''::text, pg_catalog.now()) + %L::interval)', default_ttl::text) END)
$fn$;

-- The DEFAULT of a per-row TTL table's expiry column.
CREATE OR REPLACE FUNCTION ttl._marker_default(p ttl.policy) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN p.value_ttls THEN ttl._marker_default_sql(p.expire_after)
                ELSE ttl._expiry_default_sql(p.expire_after, p.value_ttl_overrides_table_ttl) END
$fn$;

-- BEFORE UPDATE OF <column> on a CQL-style table: the value's write.
-- TG_ARGV: the table (a partition's trigger is a clone: it names the
-- partitioned table), the column's and the values column's attnums there
-- (the entry's key), the table default TTL, then the column's and the values
-- column's names (no catalog lookup per row; ALTER TABLE's event trigger makes
-- the triggers again after a rename).
CREATE OR REPLACE FUNCTION ttl._write_value() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    life interval;
    cells jsonb;
BEGIN
    -- The engine nulling expired values is not a write.
    IF current_setting('pg_ttl.expiring', true) = 'on' THEN
        RETURN NEW;
    END IF;
    IF TG_ARGV[5] = 'ttl_values' THEN
        cells := NEW.ttl_values;
    ELSE
        cells := nullif(to_jsonb(NEW) -> TG_ARGV[5], 'null'::jsonb);
    END IF;
    IF jsonb_typeof(to_jsonb(NEW) -> TG_ARGV[4]) = 'null' THEN
        cells := nullif(cells - TG_ARGV[1], '{}'::jsonb);  -- a NULL has no TTL
    ELSE
        -- (inline: a SQL function would be planned again in every transaction)
        life := nullif(current_setting('pg_ttl.row_ttl', true), '')::interval;
        life := CASE WHEN life IS NULL THEN TG_ARGV[3]::interval ELSE ttl._check_row_ttl(life) END;
        cells := coalesce(cells, '{}'::jsonb)
                 || jsonb_build_object(TG_ARGV[1], jsonb_build_array(
                        extract(epoch FROM now()),
                        CASE WHEN life = interval '0' THEN NULL ELSE extract(epoch FROM timezone('UTC', timezone('UTC', now()) + life)) END));
    END IF;
    IF TG_ARGV[5] = 'ttl_values' THEN
        NEW.ttl_values := cells;
    ELSE
        NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[5], cells));
    END IF;
    RETURN NEW;
END
$fn$;

-- BEFORE UPDATE OF the marker on a CQL-style table (an INSERT that overwrites
-- a row: INSERT ... ON CONFLICT DO UPDATE SET ttl_expires_at = EXCLUDED...):
-- the values the old INSERT wrote keep their own write time and TTL, as in
-- CQL, so they get entries of their own before the marker moves (the values
-- this statement writes have theirs from their own triggers, in any order).
-- TG_ARGV: the table, the marker's, write time's and values' attnums there.
CREATE OR REPLACE FUNCTION ttl._keep_value_times() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    o jsonb;
    n jsonb;
    had jsonb;
    cells jsonb;
    entry jsonb;
    c smallint;
BEGIN
    IF current_setting('pg_ttl.expiring', true) = 'on' THEN
        RETURN NEW;
    END IF;
    SELECT * INTO p FROM ttl.policy WHERE relid = TG_ARGV[0]::oid;
    o := to_jsonb(OLD);
    IF (o -> ttl._attname(p.relid, p.row_expiry_attnum)) IS NOT DISTINCT FROM (to_jsonb(NEW) -> ttl._attname(p.relid, p.row_expiry_attnum))
       AND (o -> ttl._attname(p.relid, p.row_write_attnum)) IS NOT DISTINCT FROM (to_jsonb(NEW) -> ttl._attname(p.relid, p.row_write_attnum)) THEN
        RETURN NEW;
    END IF;
    n := to_jsonb(NEW);
    had := coalesce(nullif(o -> ttl._attname(p.relid, p.row_values_attnum), 'null'::jsonb), '{}'::jsonb);
    cells := coalesce(nullif(n -> ttl._attname(p.relid, p.row_values_attnum), 'null'::jsonb), '{}'::jsonb);
    entry := jsonb_build_array(extract(epoch FROM (o ->> ttl._attname(p.relid, p.row_write_attnum))::timestamptz),
                               extract(epoch FROM (o ->> ttl._attname(p.relid, p.row_expiry_attnum))::timestamptz));
    -- Written by the old INSERT (no entry before), still there, and not written now (no entry yet).
    FOR c IN SELECT * FROM ttl._value_columns(p) LOOP
        IF jsonb_typeof(o -> ttl._attname(p.relid, c)) IS DISTINCT FROM 'null'
           AND jsonb_typeof(n -> ttl._attname(p.relid, c)) IS DISTINCT FROM 'null'
           AND NOT had ? c::text AND NOT cells ? c::text THEN
            cells := cells || jsonb_build_object(c::text, entry);
        END IF;
    END LOOP;
    NEW := jsonb_populate_record(NEW, jsonb_build_object(ttl._attname(p.relid, p.row_values_attnum),
                                                         nullif(cells, '{}'::jsonb)));
    RETURN NEW;
END
$fn$;

-- The columns of a CQL-style table that carry a TTL of their own: every column
-- but the primary key's, the ones pg_ttl added and generated columns.
CREATE OR REPLACE FUNCTION ttl._value_columns(p ttl.policy) RETURNS SETOF smallint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT a.attnum
      FROM pg_attribute a
     WHERE a.attrelid = p.relid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
       AND p.value_ttls
       AND a.attnum IS DISTINCT FROM p.row_expiry_attnum AND a.attnum IS DISTINCT FROM p.row_write_attnum
       AND a.attnum IS DISTINCT FROM p.row_values_attnum
       AND NOT EXISTS (SELECT 1 FROM pg_index i
                        WHERE i.indrelid = p.relid AND i.indisprimary AND a.attnum = ANY (i.indkey))
     ORDER BY a.attnum
$fn$;

-- A value's expiry / write time in a CQL-style table, as SQL over the table's
-- columns: its own entry, else (written by the INSERT) the marker's; NULL for a NULL value.
CREATE OR REPLACE FUNCTION ttl._cell_sql(p ttl.policy, col smallint, part integer) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('CASE WHEN %1$I IS NULL THEN NULL::pg_catalog.timestamptz '
                  'WHEN %2$I OPERATOR(pg_catalog.?) %3$L '
                  'THEN pg_catalog.to_timestamp((%2$I OPERATOR(pg_catalog.->) %3$L OPERATOR(pg_catalog.->>) %4$s)::pg_catalog.float8) '
                  'ELSE %5$I END',
                  ttl._attname(p.relid, col), ttl._attname(p.relid, p.row_values_attnum), col::text, part,
                  ttl._attname(p.relid, CASE WHEN part = 1 THEN p.row_expiry_attnum ELSE p.row_write_attnum END))
$fn$;

-- The values of one CQL-style table or leaf partition that have expired at
-- `cutoff`, in the blocks [from_block, to_block), become NULL (their entries
-- go); the expiry is re-checked in the UPDATE itself. Rows whose every value
-- and marker expired are the row expiry's (deleted before this runs). Run as
-- ttl.null_expired_values (ttl._run_nulling: a short lock wait, then SKIP
-- LOCKED). Returns the number of values nulled.
CREATE OR REPLACE FUNCTION ttl.null_expired_cells(tbl regclass, part regclass, cutoff timestamptz,
                                                  from_block bigint, to_block bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    live text;
    sets text;
    pending text;
    counted text;
    range text;
    stmt text;
    keys text[];
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT FOUND OR NOT p.value_ttls THEN
        RAISE EXCEPTION 'table % keeps no TTL per value', tbl USING ERRCODE = 'undefined_object';
    END IF;
    IF cutoff > now() THEN
        RAISE EXCEPTION 'cutoff % is later than now(): values would expire early', cutoff
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- per value column: expired (NULL values have no expiry)
    SELECT string_agg(format('%I = CASE WHEN %s THEN NULL ELSE %I END', v.name, v.expired, v.name), ', '),
           string_agg(v.expired, ' OR '),
           string_agg(format('COALESCE(%s, false)::pg_catalog.int4', v.expired), ' OPERATOR(pg_catalog.+) '),
           array_agg(v.attnum::text)
      INTO sets, pending, counted, keys
      FROM (SELECT c AS attnum, ttl._attname(p.relid, c) AS name,
                   format('%s OPERATOR(pg_catalog.<=) %L::pg_catalog.timestamptz', ttl._cell_sql(p, c, 1), cutoff) AS expired
              FROM ttl._value_columns(p) AS c) AS v;
    IF sets IS NULL THEN
        RETURN 0;
    END IF;
    -- The entries left: those of values still live (not of a column dropped since).
    live := format('(SELECT pg_catalog.jsonb_object_agg(e.key, e.value) FROM pg_catalog.jsonb_each(%1$I) AS e '
                   'WHERE e.key OPERATOR(pg_catalog.=) ANY (%3$L::pg_catalog.text[]) '
                   'AND (pg_catalog.jsonb_typeof(e.value OPERATOR(pg_catalog.->) 1) OPERATOR(pg_catalog.=) ''null'' '
                   'OR pg_catalog.to_timestamp((e.value OPERATOR(pg_catalog.->>) 1)::pg_catalog.float8) '
                   'OPERATOR(pg_catalog.>) %2$L::pg_catalog.timestamptz))',
                   ttl._attname(p.relid, p.row_values_attnum), cutoff, keys);
    -- An entry of a dropped column would keep its row alive: such rows are due too.
    pending := format('%s OR (%2$I IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.jsonb_object_keys(%2$I) AS k(k) '
                      'WHERE k.k OPERATOR(pg_catalog.<>) ALL (%3$L::pg_catalog.text[])))',
                      pending, ttl._attname(p.relid, p.row_values_attnum), keys);
    sets := format('%s, %I = %s', sets, ttl._attname(p.relid, p.row_values_attnum), live);
    -- %6$s: how the candidates are read (plain, or skipping rows the application holds)
    stmt := 'WITH due AS (SELECT ctid AS ttl_row, %4$s AS ttl_nulled FROM ONLY %1$s WHERE %3$s AND (%5$s) %6$s), '
            'done AS (UPDATE ONLY %1$s AS t SET %2$s FROM due WHERE t.ctid OPERATOR(pg_catalog.=) due.ttl_row AND (%5$s) '
            'RETURNING due.ttl_nulled) '
            'SELECT COALESCE(pg_catalog.sum(ttl_nulled), 0) FROM done';
    range := ttl._block_range_sql(from_block, to_block);
    RETURN ttl._run_nulling(tbl, format(stmt, part, sets, range, counted, pending, ''),
                            format(stmt, part, sets, range, counted, pending, 'FOR UPDATE SKIP LOCKED'));
END
$fn$;

-- The entries of dropped value columns (attnums `keys`) leave ttl_values: one
-- UPDATE of the rows that have one, as whoever dropped the column.
CREATE OR REPLACE FUNCTION ttl._forget_values(tbl oid, keys text[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    vals name;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    vals := ttl._attname(tbl, p.row_values_attnum);
    IF NOT FOUND OR NOT p.value_ttls OR vals IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('pg_ttl.expiring', 'on', true);
    EXECUTE format('UPDATE %s SET %I = NULLIF(%I OPERATOR(pg_catalog.-) %L::pg_catalog.text[], ''{}''::pg_catalog.jsonb) '
                   'WHERE %I OPERATOR(pg_catalog.?|) %L::pg_catalog.text[]', tbl::regclass, vals, vals, keys, vals, keys);
    PERFORM set_config('pg_ttl.expiring', 'off', true);
END
$fn$;

-- The arguments of a value column's trigger (ttl._write_value), as SQL literals.
CREATE OR REPLACE FUNCTION ttl._value_trigger_args(p ttl.policy, c smallint) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('%L, %L, %L, %L, %L, %L', p.relid::text, c::text, p.row_values_attnum::text,
                  coalesce(p.expire_after, interval '0')::text, ttl._attname(p.relid, c),
                  ttl._attname(p.relid, p.row_values_attnum))
$fn$;

-- A CQL-style table's value triggers as the catalog says: one per value column.
CREATE OR REPLACE FUNCTION ttl._value_triggers_sync(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    t record;
    c smallint;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    FOR t IN SELECT tgname FROM pg_trigger WHERE tgrelid = tbl AND tgname ~ '^ttl_value_([0-9]+|0_marker)$' AND NOT tgisinternal LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, tbl::regclass);
    END LOOP;
    IF p.relid IS NULL OR NOT p.value_ttls OR p.row_values_attnum IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TRIGGER ttl_value_0_marker BEFORE UPDATE OF %I, %I ON %s FOR EACH ROW '
                   'EXECUTE FUNCTION ttl._keep_value_times(%L)', ttl._attname(tbl, p.row_expiry_attnum),
                   ttl._attname(tbl, p.row_write_attnum), tbl::regclass, tbl::text);
    FOR c IN SELECT * FROM ttl._value_columns(p) LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OF %I ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION ttl._write_value(%s)', 'ttl_value_' || c,
                       ttl._attname(tbl, c), tbl::regclass, ttl._value_trigger_args(p, c));
    END LOOP;
END
$fn$;

-- ALTER TABLE tbl ALTER COLUMN col TYPE new_type [USING using_expr] for a value
-- column of a CQL-style table. PostgreSQL refuses to change the type of a column
-- a trigger is declared on (its ttl_value_<attnum> trigger): this drops the
-- trigger, changes the type and makes the trigger again, in the caller's
-- transaction and with the caller's rights (the table's owner; nothing runs as
-- anyone else); with strict visibility its ttl_live view, which depends on the
-- column too, is made again. The values' TTLs stay: they are kept by column
-- number, which the change keeps. new_type and using_expr are SQL, read with
-- search_path = pg_catalog: a type or function of another schema is written
-- schema-qualified.
CREATE OR REPLACE FUNCTION ttl.alter_value_type(tbl regclass, col name, new_type text, using_expr text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    n smallint;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    IF NOT coalesce(p.value_ttls, false) THEN
        RAISE EXCEPTION 'table % is not CQL-style (it keeps no TTL per value)', tbl
            USING ERRCODE = 'feature_not_supported',
                  HINT = format('Use ALTER TABLE %s ALTER COLUMN %I TYPE ... directly.', tbl, col);
    END IF;
    n := ttl._attnum(tbl, col, NULL);
    IF n NOT IN (SELECT ttl._value_columns(p)) THEN
        RAISE EXCEPTION 'column "%" of table % is not a value column (it is in the primary key, or pg_ttl''s own)', col, tbl
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF nullif(btrim(new_type), '') IS NULL THEN
        RAISE EXCEPTION 'a type is needed' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', 'ttl_value_' || n, tbl);
    IF p.strict_visibility THEN
        PERFORM ttl._drop_live_view(tbl);  -- the view on the column blocks the change too
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s', tbl, col, new_type)
            || coalesce(' USING ' || using_expr, '');
    -- (ALTER TABLE's event trigger has made them again already, unless event triggers are off)
    IF ttl._value_triggers_stale(tbl) THEN
        PERFORM ttl._value_triggers_sync(tbl);
    END IF;
    IF p.strict_visibility AND ttl._live_view_stale(tbl) THEN
        PERFORM ttl._strict_view_sync(tbl);
    END IF;
END
$fn$;

-- Whether a CQL-style table's value triggers are out of step with its columns
-- (a column added, dropped or renamed): then ALTER TABLE's event trigger syncs them.
CREATE OR REPLACE FUNCTION ttl._value_triggers_stale(tbl oid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- each trigger's name and its column's name as its fifth argument (tgargs: the
    -- arguments, each followed by a zero byte; compared escaped, as a name
    -- outside ASCII is escaped there too)
    SELECT coalesce(array_agg(t.tgname::text || ':' || split_part(encode(t.tgargs, 'escape'), '\000', 5)
                              ORDER BY t.tgname::text), '{}')
           IS DISTINCT FROM
           coalesce((SELECT array_agg('ttl_value_' || c || ':'
                                      || encode(convert_to(ttl._attname(p.relid, c), getdatabaseencoding()), 'escape')
                                      ORDER BY 'ttl_value_' || c)
                       FROM ttl.policy p, ttl._value_columns(p) AS c WHERE p.relid = tbl), '{}')
      FROM pg_trigger t
     WHERE t.tgrelid = tbl AND t.tgname ~ '^ttl_value_[0-9]+$' AND NOT t.tgisinternal
$fn$;

-- Partitions of a per-row TTL table (CQL-style or not) expire whole, as
-- YugabyteDB's files do: a range partition is dropped (or detached) once the
-- latest expiry of anything written to it has passed. ttl.partition_expiry
-- keeps, per leaf partition, the latest write time and the latest expiry
-- written to it ('infinity': something never expires), both rounded up to the
-- partition_expiry_step setting, so that a write updates the record at most
-- once per step (and a partition goes up to one step late). A row trigger on
-- the partitioned table keeps it (ttl_partition_expiry); a partition whose
-- record is not known complete (attached with rows, or enabled while it had
-- rows) is scanned once. Three rules, as YugabyteDB's flags:
--   default: the latest expiry has passed, and the table TTL since the latest write;
--   "ttl_value_ttl_overrides_table_ttl": the latest expiry alone;
--   "ttl_ignore_value_ttl": the table TTL since the latest write alone.

-- The latest write in a row of a per-row TTL table: its INSERT, or a value's UPDATE.
CREATE OR REPLACE FUNCTION ttl.latest_write(written timestamptz, cells jsonb) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN cells IS NULL THEN written
                ELSE (SELECT GREATEST(written, pg_catalog.max(pg_catalog.to_timestamp(
                                 (c.value OPERATOR(pg_catalog.->>) 0)::pg_catalog.float8)))
                        FROM pg_catalog.jsonb_each(cells) AS c) END
$fn$;



-- Raise a partition's record to (write, expiry), rounded up. Only ever raises
-- (anyone may: at worst a partition is kept longer). complete: the caller has
-- counted every row of it (a scan, or a partition created empty), which only
-- a member of the partition's owner may say: it lets the engine skip the scan.
-- Returns the record's latest expiry. (No function returns the table's row
-- type: a downgrade drops the table, and functions are left as they are.)
CREATE OR REPLACE FUNCTION ttl._note_partition(part oid, write timestamptz, expiry timestamptz, complete boolean)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER  -- the application's writes record it; nobody else may write ttl.partition_expiry
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    step float8;
    rec ttl.partition_expiry;
BEGIN
    IF complete AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class WHERE oid = part), 'MEMBER') THEN
        RAISE EXCEPTION 'only the owner of % may record it as counted', part::regclass
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- (inline, not ttl._round_up: a SQL function is planned again in every transaction)
    step := extract(epoch FROM coalesce((SELECT value::interval FROM ttl.settings WHERE name = 'partition_expiry_step'),
                                        interval '1 hour'));
    write := coalesce(write, '-infinity');
    IF isfinite(write) THEN
        write := to_timestamp(ceil(extract(epoch FROM write) / step) * step);
    END IF;
    expiry := coalesce(expiry, 'infinity');
    IF isfinite(expiry) THEN
        expiry := to_timestamp(ceil(extract(epoch FROM expiry) / step) * step);
    END IF;
    SELECT * INTO rec FROM ttl.partition_expiry WHERE relid = part;
    -- Usually nothing to raise: no row lock, so concurrent writers never wait here.
    IF FOUND AND rec.latest_write >= write AND rec.latest_expiry >= expiry AND (rec.complete OR NOT complete) THEN
        RETURN rec.latest_expiry;
    END IF;
    INSERT INTO ttl.partition_expiry AS e (relid, latest_write, latest_expiry, complete)
    VALUES (part, write, expiry, complete)
    ON CONFLICT (relid) DO UPDATE
       SET latest_write = GREATEST(e.latest_write, excluded.latest_write),
           latest_expiry = GREATEST(e.latest_expiry, excluded.latest_expiry),
           complete = e.complete OR excluded.complete
    RETURNING * INTO rec;
    RETURN rec.latest_expiry;
END
$fn$;

-- AFTER INSERT OR UPDATE on a partitioned per-row TTL table (cloned to every
-- partition). TG_ARGV: the expiry column, the values column ('' if none).
-- Within a transaction, rows that do not raise the partition's record cost
-- one comparison (the record is remembered in a transaction-local setting).
CREATE OR REPLACE FUNCTION ttl._track_partition() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    e timestamptz;
    seen text := current_setting('pg_ttl.partition_expiry', true);
    latest timestamptz;
BEGIN
    IF TG_ARGV[0] = 'ttl_expires_at' AND TG_ARGV[1] = 'ttl_values' THEN
        e := CASE WHEN NEW.ttl_values IS NULL THEN NEW.ttl_expires_at
                  ELSE ttl.latest_expiry(NEW.ttl_expires_at, NEW.ttl_values) END;
    ELSIF TG_ARGV[0] = 'ttl_expires_at' AND TG_ARGV[1] = '' THEN
        e := NEW.ttl_expires_at;
    ELSE
        e := ttl.latest_expiry((to_jsonb(NEW) ->> TG_ARGV[0])::timestamptz,
                               CASE WHEN TG_ARGV[1] <> '' THEN nullif(to_jsonb(NEW) -> TG_ARGV[1], 'null'::jsonb) END);
    END IF;
    e := coalesce(e, 'infinity');
    IF seen IS NOT NULL AND split_part(seen, '|', 1) = TG_RELID::text AND e <= split_part(seen, '|', 2)::timestamptz THEN
        RETURN NULL;
    END IF;
    latest := ttl._note_partition(TG_RELID, now(), e, false);
    PERFORM set_config('pg_ttl.partition_expiry', TG_RELID::text || '|' || latest::text, true);
    RETURN NULL;
END
$fn$;

-- A partition's record from its rows (once: then the trigger keeps it).
CREATE OR REPLACE FUNCTION ttl._scan_partition(tbl oid, part oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    w timestamptz;
    e timestamptz;
    never boolean;
    expiry text;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    expiry := ttl._managed_expression(p);
    EXECUTE format('SELECT pg_catalog.max(%1$s), pg_catalog.bool_or(%1$s IS NULL), pg_catalog.max(%2$s) FROM ONLY %3$s',
                   expiry,
                   CASE WHEN p.row_values_attnum IS NULL THEN format('%I', ttl._attname(tbl, p.row_write_attnum))
                        ELSE format('ttl.latest_write(%I, %I)', ttl._attname(tbl, p.row_write_attnum),
                                    ttl._attname(tbl, p.row_values_attnum)) END,
                   part::regclass)
       INTO e, never, w;
    PERFORM ttl._note_partition(part, w, CASE WHEN never THEN 'infinity' ELSE coalesce(e, '-infinity') END, true);
END
$fn$;

-- The leaf partitions among `parts` (of per-row TTL table `tbl`, range
-- partitions, not the default one) that were written to and whose every row
-- and value has expired at `cutoff` by the table's rule (above). Partitions not known complete are scanned once.
CREATE OR REPLACE FUNCTION ttl.partitions_expired(tbl oid, parts oid[], cutoff timestamptz) RETURNS SETOF oid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    part oid;
    rec ttl.partition_expiry;
    table_ttl interval;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    -- Only while the writes are tracked: a record without its trigger could be stale.
    IF NOT FOUND OR p.row_expiry_attnum IS NULL
       OR NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'ttl_partition_expiry' AND NOT tgisinternal) THEN
        RETURN;
    END IF;
    table_ttl := nullif(p.expire_after, interval '0');
    FOR part IN
        SELECT c.oid FROM pg_class c
          JOIN pg_inherits i ON i.inhrelid = c.oid
          JOIN pg_partitioned_table pt ON pt.partrelid = i.inhparent
         WHERE c.oid = ANY (parts) AND c.relkind = 'r' AND pt.partstrat = 'r'
           AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
    LOOP
        SELECT * INTO rec FROM ttl.partition_expiry WHERE relid = part;
        IF NOT FOUND OR NOT rec.complete THEN
            PERFORM ttl._scan_partition(tbl, part);
            SELECT * INTO rec FROM ttl.partition_expiry WHERE relid = part;
        END IF;
        -- Never written to (e.g. made ahead for later data): kept.
        IF rec.latest_write > '-infinity' AND (CASE WHEN p.ignore_value_ttl THEN rec.latest_write + table_ttl <= cutoff
                 WHEN p.value_ttl_overrides_table_ttl THEN rec.latest_expiry <= cutoff
                 ELSE rec.latest_expiry <= cutoff AND (table_ttl IS NULL OR rec.latest_write + table_ttl <= cutoff) END)
        THEN
            RETURN NEXT part;
        END IF;
    END LOOP;
END
$fn$;

-- In the transaction that drops or detaches a partition, with its lock held:
-- a write committed since the decision may have raised its record.
CREATE OR REPLACE FUNCTION ttl._partition_still_expired(tbl oid, part oid, cutoff timestamptz) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM ttl.policy WHERE relid = tbl AND row_expiry_attnum IS NOT NULL)
       AND NOT EXISTS (SELECT 1 FROM ttl.partitions_expired(tbl, ARRAY[part], cutoff)) THEN
        RAISE EXCEPTION 'partition % was written to since this run found it expired: kept', part::regclass
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$fn$;

-- Forget the records of a table's partitions while nothing keeps them (no
-- tracking trigger): stale ones must not survive until tracking starts again.
-- Safe for anyone to call: a forgotten partition is scanned again.
CREATE OR REPLACE FUNCTION ttl._forget_partitions(tbl oid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER  -- the table's owner calls it; nobody else may write ttl.partition_expiry
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'ttl_partition_expiry' AND NOT tgisinternal) THEN
        DELETE FROM ttl.partition_expiry
         WHERE relid IN (SELECT t.relid FROM pg_partition_tree(tbl) t WHERE t.isleaf);
    END IF;
END
$fn$;

-- The tracking trigger of a partitioned per-row TTL table, as the catalog says.
CREATE OR REPLACE FUNCTION ttl._partition_tracking_sync(tbl oid) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p ttl.policy;
    had boolean;
    wanted boolean;
BEGIN
    SELECT * INTO p FROM ttl.policy WHERE relid = tbl;
    had := EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'ttl_partition_expiry' AND NOT tgisinternal);
    wanted := p.row_expiry_attnum IS NOT NULL AND (SELECT relkind FROM pg_class WHERE oid = tbl) = 'p';
    IF had THEN
        EXECUTE format('DROP TRIGGER ttl_partition_expiry ON %s', tbl::regclass);
    END IF;
    -- Tracking starts (records from an earlier time are stale) or stops: forget.
    -- Replaced in the same transaction, it misses no write: the records stay.
    IF NOT had OR NOT wanted THEN
        PERFORM ttl._forget_partitions(tbl);
    END IF;
    IF wanted THEN
        EXECUTE format('CREATE TRIGGER ttl_partition_expiry AFTER INSERT OR UPDATE ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION ttl._track_partition(%L, %L)', tbl::regclass,
                       ttl._attname(tbl, p.row_expiry_attnum),
                       coalesce(ttl._attname(tbl, p.row_values_attnum)::text, ''));
    END IF;
END
$fn$;

-- Records of partitions no longer under a per-row TTL table (detached): a
-- partition written to while detached and attached again must be scanned again.
CREATE OR REPLACE FUNCTION ttl._forget_detached() RETURNS void
LANGUAGE sql
SECURITY DEFINER  -- ALTER TABLE's event trigger, as whoever altered a table; only forgets
SET search_path = pg_catalog, pg_temp
AS $fn$
    DELETE FROM ttl.partition_expiry e
     WHERE NOT EXISTS (SELECT 1 FROM pg_partition_ancestors(e.relid) a
                         JOIN ttl.policy p ON p.relid = a.relid AND p.row_expiry_attnum IS NOT NULL)
$fn$;

-- Partitioned per-row TTL tables from before partitions were tracked (an
-- upgrade): their tracking starts now (each partition is scanned once).
SELECT ttl._partition_tracking_sync(p.relid)
  FROM ttl.policy p JOIN pg_class c ON c.oid = p.relid
 WHERE p.row_expiry_attnum IS NOT NULL AND c.relkind = 'p'
   AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = p.relid AND t.tgname = 'ttl_partition_expiry');

-- CQL-style tables whose value triggers an older version made: made again.
SELECT ttl._value_triggers_sync(p.relid)
  FROM ttl.policy p
 WHERE p.value_ttls AND ttl._value_triggers_stale(p.relid);
