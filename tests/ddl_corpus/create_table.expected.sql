CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
SELECT ttl.set_options('events', CAST('{"expire_after": "30 days", "column": "created_at", "job_cron": "@daily", "select_batch_size": "1000", "delete_batch_size": "500", "delete_rate_limit": "0", "pause": "false"}' AS jsonb));
