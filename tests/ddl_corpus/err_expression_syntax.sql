ALTER TABLE sessions SET (ttl_expiration_expression = 'expire_at +');
