CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)
  WITH (ttl_expire_after = '30 days', ttl_column = 'created_at',
        ttl_job_cron = '@daily', ttl_select_batch_size = 1000,
        ttl_delete_batch_size = 500, ttl_delete_rate_limit = 0, ttl_pause = false);
