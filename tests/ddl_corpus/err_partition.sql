CREATE TABLE e1 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2024-02-01') WITH (ttl_expire_after = '1 day', ttl_column = 'at');
