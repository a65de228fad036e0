ALTER TABLE events ADD COLUMN seen_at timestamptz, SET (fillfactor = 80), ALTER COLUMN body SET (n_distinct = 100);
SELECT ttl.set_options('events', CAST('{"column": "seen_at"}' AS jsonb));
SELECT ttl.enable_column('events', 'body', '1 hour');
