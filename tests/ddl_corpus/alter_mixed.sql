ALTER TABLE events ADD COLUMN seen_at timestamptz, SET (fillfactor = 80, ttl_column = 'seen_at'), ALTER COLUMN body SET (n_distinct = 100, ttl_expire_after = '1 hour');
