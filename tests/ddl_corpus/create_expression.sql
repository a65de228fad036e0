CREATE TABLE sessions (id uuid PRIMARY KEY, expire_at timestamptz)
  WITH (ttl_expiration_expression = 'expire_at');
