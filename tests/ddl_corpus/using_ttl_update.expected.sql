SELECT ttl.using_ttl(CAST('0 seconds' AS interval), CAST('pageviews' AS regclass), CAST('{"views"}' AS name[]));
UPDATE pageviews
   SET views = 10 WHERE id = 1;
RESET pg_ttl.row_ttl;
