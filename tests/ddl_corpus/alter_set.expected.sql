SELECT ttl.set_options('events', CAST('{"expire_after": "7 days"}' AS jsonb));
