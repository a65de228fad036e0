CREATE TABLE sessions (id uuid PRIMARY KEY, expire_at timestamptz);
SELECT ttl.set_options('sessions', CAST('{"expiration_expression": "expire_at"}' AS jsonb));
