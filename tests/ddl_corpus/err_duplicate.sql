ALTER TABLE events SET (ttl_pause = true), SET (ttl_pause = false);
