CREATE TABLE IF NOT EXISTS app.events (at date);
SELECT ttl.set_options('app.events', CAST('{"expire_after": "1 year", "column": "at"}' AS jsonb)) WHERE NOT EXISTS (SELECT 1 FROM ttl.policies WHERE relid = CAST('app.events' AS regclass));
