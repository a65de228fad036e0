ALTER TABLE sessions SET (ttl_expiration_expression = 'now(); DROP TABLE users');
