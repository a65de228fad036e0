CREATE TEMP TABLE t (a date) WITH (ttl_expire_after = '1 day', ttl_column = 'a');
