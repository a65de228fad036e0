SELECT pg_catalog.set_config('pg_ttl.row_ttl_before', COALESCE(pg_catalog.current_setting('pg_ttl.row_ttl', TRUE), ''), TRUE);
SELECT ttl.using_ttl(CAST('0 seconds' AS interval), CAST('pageviews' AS regclass), CAST('{"views"}' AS name[]));
UPDATE pageviews
   SET views = 10 WHERE id = 1;
SELECT pg_catalog.set_config('pg_ttl.row_ttl', pg_catalog.current_setting('pg_ttl.row_ttl_before'), TRUE);
