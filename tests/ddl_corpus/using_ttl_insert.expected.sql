SELECT ttl.using_ttl(CAST('10 seconds' AS interval), CAST('pageviews' AS regclass));
INSERT INTO pageviews (id, views) VALUES (1, 10);
RESET pg_ttl.row_ttl;
