ALTER TABLE users ALTER COLUMN email SET (ttl_job_cron = '@daily');
