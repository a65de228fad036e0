SELECT ttl.disable('events');  -- removes TTL
