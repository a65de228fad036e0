ALTER TABLE events SET (ttl_select_rate_limit = -1);
