SELECT ttl.using_ttl('0 seconds');
UPDATE pageviews
   SET views = 10 WHERE id = 1;
RESET pg_ttl.row_ttl;
