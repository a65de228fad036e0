ALTER TABLE events SET (ttl = 'off');
