ALTER TABLE events RESET (ttl);  -- removes TTL
