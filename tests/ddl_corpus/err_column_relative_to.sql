ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '1 day', ttl_relative_to = 'yesterday');
