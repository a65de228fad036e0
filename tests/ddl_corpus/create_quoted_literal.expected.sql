CREATE TABLE "My Schema"."user" ("Created At" date);
SELECT ttl.set_options('"My Schema"."user"', CAST('{"expire_after": "1 day", "column": "Created At", "detach_schema": "O''Brien", "partition_action": "detach"}' AS jsonb));
