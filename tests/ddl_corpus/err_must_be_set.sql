CREATE TABLE t (a timestamptz) WITH (ttl_column = 'a', ttl_job_cron = '@daily');
