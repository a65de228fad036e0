CREATE TABLE "My Schema"."user" ("Created At" date) WITH (ttl_expire_after = '1 day', ttl_column = 'Created At', ttl_detach_schema = 'O''Brien', ttl_partition_action = 'detach');
