BEGIN;
-- first
SELECT 1;
ALTER TABLE events SET (ttl_delete_batch_size = 1000);   -- trailing comment
/* block */ SELECT 2;
COMMIT;
