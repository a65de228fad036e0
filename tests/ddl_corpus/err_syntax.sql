ALTER TABLE events SET (ttl_pause = true);
SELECT FROM WHERE;
