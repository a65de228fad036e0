-- Event triggers keep the catalog true to the tables it describes.
-- They run for every DDL statement in the database, so they do nothing
-- unless the statement touches a table that has a TTL.

-- The parents of an orphan policy (sql/80_orphans.sql) in order, each with its
-- key columns (the policy keeps them one parent after the other in
-- parent_attnums, `nkeys` each). Columns, not the policy's row type: a
-- downgrade drops that table. Here, before its first user: the drop trigger
-- below fires on the drops of a code layer replayed after an upgrade.
CREATE OR REPLACE FUNCTION ttl._orphan_parents(parent_relids oid[], parent_attnums smallint[], nkeys integer)
RETURNS TABLE (n integer, parent oid, attnums smallint[])
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT k::integer, parent_relids[k], parent_attnums[(k - 1) * nkeys + 1 : k * nkeys]
      FROM generate_subscripts(parent_relids, 1) AS k
     ORDER BY k
$fn$;

-- DROP TABLE / DROP SCHEMA ... CASCADE remove the policies of dropped tables;
-- dropping a column a policy uses is refused.
CREATE OR REPLACE FUNCTION ttl._on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER  -- the dropped table's owner may not own the catalog rows any more
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT o.objid, o.objsubid, o.object_identity
          FROM pg_event_trigger_dropped_objects() o
         WHERE o.object_type = 'table column'
           AND (EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = o.objid AND p.ttl_attnum = o.objsubid)
                OR EXISTS (SELECT 1 FROM ttl.column_policy c WHERE c.relid = o.objid AND c.attnum = o.objsubid))
    LOOP
        RAISE EXCEPTION 'cannot drop column %: it is used by a TTL policy', d.object_identity
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable TTL first: SELECT ttl.disable(%L);', d.objid::regclass::text);
    END LOOP;
    FOR d IN
        SELECT o.object_identity, op.relid
          FROM pg_event_trigger_dropped_objects() o
          JOIN ttl.orphan_policy op
            ON (op.relid = o.objid AND (o.objsubid = ANY (op.key_attnums) OR o.objsubid = op.age_attnum))
            OR EXISTS (SELECT 1 FROM ttl._orphan_parents(op.parent_relids, op.parent_attnums,
                                                         cardinality(op.key_attnums)) pk
                        WHERE pk.parent = o.objid AND o.objsubid = ANY (pk.attnums))
         WHERE o.object_type = 'table column'
    LOOP
        RAISE EXCEPTION 'cannot drop column %: it is used by the orphan policy of %', d.object_identity, d.relid::regclass
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable it first: SELECT ttl.disable_orphans(%L);', d.relid::regclass::text);
    END LOOP;

    -- A value column dropped from a CQL-style table: its entries in ttl_values
    -- must go (they would keep their rows alive). Not here, as this function's
    -- owner: ALTER TABLE's event trigger removes them as whoever dropped it.
    IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() o JOIN ttl.policy p ON p.relid = o.objid
                WHERE o.object_type = 'table column' AND p.value_ttls) THEN
        PERFORM set_config('pg_ttl.dropped_values',
                           coalesce(current_setting('pg_ttl.dropped_values', true), '')
                           || (SELECT string_agg(format('%s:%s;', o.objid, o.objsubid), '')
                                 FROM pg_event_trigger_dropped_objects() o JOIN ttl.policy p ON p.relid = o.objid
                                WHERE o.object_type = 'table column' AND p.value_ttls), true);
    END IF;
    -- Runs cut short by the drop: nobody can finish them any more (their
    -- table's owner is gone from the catalog), so they are closed here.
    UPDATE ttl.run_unit SET status = 'skipped', error = 'the partition was dropped during the run',
           finished_at = clock_timestamp()
     WHERE status = 'running'
       AND unit_relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    UPDATE ttl.run SET status = 'interrupted', error = 'the table was dropped during the run',
           finished_at = clock_timestamp()
     WHERE status = 'running'
       AND relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');

    -- Expiration queues of dropped tables (a queue table dropped alone: its record).
    FOR d IN SELECT q.relid FROM ttl.queue q
              WHERE q.relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
                 OR q.queue_relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
    LOOP
        PERFORM ttl._queue_drop(d.relid);
    END LOOP;
    DELETE FROM ttl.tier
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    DELETE FROM ttl.partition_expiry
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    DELETE FROM ttl.policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    DELETE FROM ttl.column_policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    -- A dropped parent would make every child an orphan: its children's orphan
    -- policies go with it (a table recreated under the same name must not
    -- cost its children; with several parents, the others alone would not say
    -- what the owner meant), and the owners are told.
    FOR d IN
        DELETE FROM ttl.orphan_policy
         WHERE parent_relids && ARRAY(SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
           AND relid NOT IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
        RETURNING relid
    LOOP
        RAISE NOTICE 'the orphan policy of % was removed: a parent table of it was dropped', d.relid::regclass;
    END LOOP;
    DELETE FROM ttl.orphan_policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
END
$fn$;

-- After ALTER TABLE: a retyped TTL column, or an expression that no longer
-- compiles (e.g. a column it uses was renamed or retyped), is refused.
-- Runs with the rights of whoever altered the table (its owner): checking an
-- expression only parses it (ttl._expression_error), and nothing here needs more.
CREATE OR REPLACE FUNCTION ttl._on_ddl_end() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    p record;
    c record;
    err text;
BEGIN
    FOR p IN
        SELECT pol.*, a.atttypid AS now_typid, a.attname
          FROM ttl.policy pol
          LEFT JOIN pg_attribute a ON a.attrelid = pol.relid AND a.attnum = pol.ttl_attnum AND NOT a.attisdropped
         WHERE pol.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
    LOOP
        IF p.ttl_attnum IS NOT NULL AND p.now_typid IS DISTINCT FROM p.ttl_atttypid THEN
            RAISE EXCEPTION 'cannot change the type of column "%" of table %: it is the TTL column', p.attname,
                p.relid::regclass
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = format('Disable TTL first: SELECT ttl.disable(%L);', p.relid::regclass::text);
        END IF;
        IF p.expiration_expression IS NOT NULL THEN
            err := ttl._expression_error(p.relid::regclass, p.expiration_expression);
            IF err IS NOT NULL THEN
                RAISE EXCEPTION 'this change breaks the "ttl_expiration_expression" of table %: it %', p.relid::regclass, err
                    USING ERRCODE = 'dependent_objects_still_exist',
                          HINT = format('Disable TTL first (SELECT ttl.disable(%L);) or change the expression.',
                                        p.relid::regclass::text);
            END IF;
        END IF;
    END LOOP;
    FOR c IN
        SELECT cp.relid, cp.attnum, cp.atttypid, a.atttypid AS now_typid, a.attname
          FROM ttl.column_policy cp
          JOIN pg_attribute a ON a.attrelid = cp.relid AND a.attnum = cp.attnum
         WHERE cp.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
           AND a.atttypid IS DISTINCT FROM cp.atttypid
    LOOP
        RAISE EXCEPTION 'cannot change the type of column "%" of table %: it has a column TTL', c.attname,
            c.relid::regclass
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable its TTL first: SELECT ttl.disable_column(%L, %L);',
                                c.relid::regclass::text, c.attname);
    END LOOP;
    -- A partition detached from a partitioned per-row TTL table: its record goes.
    IF EXISTS (SELECT 1 FROM ttl.partition_expiry LIMIT 1)
       AND EXISTS (SELECT 1 FROM ttl.policy pol
                    WHERE pol.row_expiry_attnum IS NOT NULL
                      AND pol.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')) THEN
        PERFORM ttl._forget_detached();
    END IF;
    -- Value columns dropped from CQL-style tables (noted by the sql_drop trigger).
    FOR p IN
        SELECT split_part(e, ':', 1)::oid AS relid, array_agg(split_part(e, ':', 2)) AS keys
          FROM unnest(string_to_array(nullif(current_setting('pg_ttl.dropped_values', true), ''), ';')) AS e
         WHERE e <> '' GROUP BY 1
    LOOP
        PERFORM ttl._forget_values(p.relid, p.keys);
    END LOOP;
    PERFORM set_config('pg_ttl.dropped_values', '', true);
    -- A column added to (or dropped from) a CQL-style table: its value triggers follow.
    FOR p IN
        SELECT pol.* FROM ttl.policy pol
         WHERE pol.value_ttls
           AND pol.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
           AND ttl._value_triggers_stale(pol.relid)
    LOOP
        PERFORM ttl._check_value_columns(x) FROM ttl.policy x WHERE x.relid = p.relid;
        PERFORM ttl._value_triggers_sync(p.relid);
    END LOOP;
    -- A partition attached to or detached from a table with an expiration
    -- queue (or one of its partitions), a column renamed: the queue and its
    -- triggers follow (sql/78_queues.sql).
    IF EXISTS (SELECT 1 FROM ttl.queue LIMIT 1) THEN
        FOR p IN
            SELECT DISTINCT q.relid FROM ttl.queue q
             WHERE q.relid IN (SELECT coalesce(a.relid, cmd.objid)  -- no ancestors: not a partition
                                 FROM pg_event_trigger_ddl_commands() cmd
                                 LEFT JOIN LATERAL pg_partition_ancestors(cmd.objid) a ON true
                                WHERE cmd.command_tag = 'ALTER TABLE'
                                  AND cmd.object_type IN ('table', 'table column'))
        LOOP
            PERFORM ttl._queue_sync(p.relid);
        END LOOP;
    END IF;
    -- Strict visibility's view shows the table's columns as they are now.
    FOR p IN
        SELECT pol.relid FROM ttl.policy pol
         WHERE pol.strict_visibility
           AND pol.relid IN (SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'ALTER TABLE')
           AND ttl._live_view_stale(pol.relid)
    LOOP
        PERFORM ttl._strict_view_sync(p.relid);
    END LOOP;
END
$fn$;

DROP EVENT TRIGGER IF EXISTS pg_ttl_sql_drop;
CREATE EVENT TRIGGER pg_ttl_sql_drop ON sql_drop
    EXECUTE FUNCTION ttl._on_sql_drop();

DROP EVENT TRIGGER IF EXISTS pg_ttl_ddl_end;
CREATE EVENT TRIGGER pg_ttl_ddl_end ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION ttl._on_ddl_end();

-- A partition created empty under a partitioned per-row TTL table: its record
-- of latest write and expiry starts complete (sql/73_value_ttls.sql), so the
-- engine never needs to scan it.
CREATE OR REPLACE FUNCTION ttl._on_create_table() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    part oid;
BEGIN
    FOR part IN
        SELECT c.objid FROM pg_event_trigger_ddl_commands() c
          JOIN pg_class r ON r.oid = c.objid AND r.relkind = 'r' AND r.relispartition
         WHERE c.command_tag = 'CREATE TABLE' AND c.object_type = 'table'
           AND EXISTS (SELECT 1 FROM pg_partition_ancestors(c.objid) a
                         JOIN ttl.policy p ON p.relid = a.relid AND p.row_expiry_attnum IS NOT NULL)
    LOOP
        PERFORM ttl._note_partition(part, '-infinity', '-infinity', true);
    END LOOP;
    -- A partition created under a table with an expiration queue gets its triggers.
    FOR part IN
        SELECT DISTINCT q.relid FROM pg_event_trigger_ddl_commands() c
          JOIN pg_class r ON r.oid = c.objid AND r.relispartition
          CROSS JOIN LATERAL pg_partition_ancestors(c.objid) a
          JOIN ttl.queue q ON q.relid = a.relid
         WHERE c.command_tag = 'CREATE TABLE' AND c.object_type = 'table'
    LOOP
        PERFORM ttl._queue_sync(part);
    END LOOP;
END
$fn$;

DROP EVENT TRIGGER IF EXISTS pg_ttl_create_table;
CREATE EVENT TRIGGER pg_ttl_create_table ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE')
    EXECUTE FUNCTION ttl._on_create_table();
