SELECT ttl.using_ttl('10 seconds');
INSERT INTO pageviews (id, views) VALUES (1, 10);
RESET pg_ttl.row_ttl;
