  ALTER TABLE events SET (ttl_expire_afterr = '1 day');
