ALTER TABLE events SET (ttl_pause = 'maybe');
