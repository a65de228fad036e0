CREATE TABLE metrics (ts bigint, v float8);
SELECT ttl.set_options('metrics', CAST('{"expire_after": "PT1H", "column": "ts", "unit": "seconds"}' AS jsonb));
