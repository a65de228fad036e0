ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '1 day', ttl_relative_to = 'write'), ALTER COLUMN phone SET (ttl_expire_after = '2 days', ttl_relative_to = 'row');
