CREATE TABLE archive AS SELECT now() AS created_at;
SELECT ttl.set_options('archive', CAST('{"expire_after": "90 days", "column": "created_at"}' AS jsonb));
