CREATE TABLE logs (at timestamptz) WITH (fillfactor = 70, autovacuum_enabled = 'false', toast.autovacuum_enabled = 'false');
SELECT ttl.set_options('logs', CAST('{"expire_after": "7 days", "column": "at"}' AS jsonb));
