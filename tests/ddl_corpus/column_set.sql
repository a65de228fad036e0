ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days');
