CREATE TABLE logs (at timestamptz) WITH (fillfactor = 70, ttl_expire_after = '7 days', autovacuum_enabled = false, ttl_column = 'at', toast.autovacuum_enabled = false);
