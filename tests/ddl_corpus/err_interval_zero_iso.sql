ALTER TABLE events SET (ttl_expire_after = 'PT0S');
