SELECT 1;

ALTER TABLE events SET (ttl_expire_after = 'banana');
