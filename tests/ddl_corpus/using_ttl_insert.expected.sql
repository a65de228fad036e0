SELECT pg_catalog.set_config('pg_ttl.row_ttl_before', COALESCE(pg_catalog.current_setting('pg_ttl.row_ttl', TRUE), ''), TRUE);
SELECT ttl.using_ttl(CAST('10 seconds' AS interval), CAST('pageviews' AS regclass));
INSERT INTO pageviews (id, views) VALUES (1, 10);
SELECT pg_catalog.set_config('pg_ttl.row_ttl', pg_catalog.current_setting('pg_ttl.row_ttl_before'), TRUE);
