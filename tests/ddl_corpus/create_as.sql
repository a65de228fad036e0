CREATE TABLE archive WITH (ttl_expire_after = '90 days', ttl_column = 'created_at') AS SELECT now() AS created_at;
