CREATE TABLE "My Schema"."My Table" ("Created At" date) WITH (ttl_expire_after = '1 day', ttl_column = 'Created At', ttl_expiration_expression_comment_free = 1);
