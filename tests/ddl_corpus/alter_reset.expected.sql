SELECT ttl.reset_options('events', VARIADIC CAST('{job_cron,pause}' AS text[]));
