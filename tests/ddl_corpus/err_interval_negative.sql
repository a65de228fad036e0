ALTER TABLE events SET (ttl_expire_after = '-30 days');
