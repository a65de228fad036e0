CREATE TABLE m (ts bigint) WITH (ttl_expire_after = '1 day', ttl_column = 'ts', ttl_unit = 'hours');
