ALTER TABLE events RESET (ttl_job_cron, ttl_pause);
