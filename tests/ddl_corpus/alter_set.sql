ALTER TABLE events SET (ttl_expire_after = '7 days');
