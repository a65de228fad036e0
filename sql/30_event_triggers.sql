-- Event triggers keep the catalog true to the tables it describes.
-- They run for every DDL statement in the database, so they do nothing
-- unless the statement touches a table that has a TTL.

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
            OR (op.parent_relid = o.objid AND o.objsubid = ANY (op.parent_attnums))
         WHERE o.object_type = 'table column'
    LOOP
        RAISE EXCEPTION 'cannot drop column %: it is used by the orphan policy of %', d.object_identity, d.relid::regclass
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = format('Disable it first: SELECT ttl.disable_orphans(%L);', d.relid::regclass::text);
    END LOOP;

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
    DELETE FROM ttl.policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    DELETE FROM ttl.column_policy
     WHERE relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table');
    -- A dropped parent would make every child an orphan: its children's orphan
    -- policies go with it (a table recreated under the same name must not
    -- cost its children), and the owners are told.
    FOR d IN
        DELETE FROM ttl.orphan_policy
         WHERE parent_relid IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
           AND relid NOT IN (SELECT objid FROM pg_event_trigger_dropped_objects() WHERE object_type = 'table')
        RETURNING relid
    LOOP
        RAISE NOTICE 'the orphan policy of % was removed: its parent table was dropped', d.relid::regclass;
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
END
$fn$;

DROP EVENT TRIGGER IF EXISTS pg_ttl_sql_drop;
CREATE EVENT TRIGGER pg_ttl_sql_drop ON sql_drop
    EXECUTE FUNCTION ttl._on_sql_drop();

DROP EVENT TRIGGER IF EXISTS pg_ttl_ddl_end;
CREATE EVENT TRIGGER pg_ttl_ddl_end ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION ttl._on_ddl_end();
