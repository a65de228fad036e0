CREATE TABLE IF NOT EXISTS app.events (at date) WITH (ttl_expire_after = '1 year', ttl_column = 'at');
