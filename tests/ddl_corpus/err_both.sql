ALTER TABLE events SET (ttl_column = 'a', ttl_expiration_expression = 'a');
