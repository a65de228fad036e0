CREATE TABLE metrics (ts bigint, v float8) WITH (ttl_expire_after = 'PT1H', ttl_column = 'ts', ttl_unit = 'seconds');
