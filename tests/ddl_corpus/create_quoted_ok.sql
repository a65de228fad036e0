CREATE TABLE "My Schema"."My Table" ("Created At" date, note text) WITH (ttl_expire_after = 'it''s', ttl_column = 'Created At');
