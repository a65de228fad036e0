ALTER TABLE events SET (ttl_job_cron = '61 * * * *');
