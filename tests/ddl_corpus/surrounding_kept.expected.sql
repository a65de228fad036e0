BEGIN;
-- first
SELECT 1;
SELECT ttl.set_options('events', CAST('{"delete_batch_size": "1000"}' AS jsonb));   -- trailing comment
/* block */ SELECT 2;
COMMIT;
