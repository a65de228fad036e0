ALTER INDEX events_pkey SET (ttl_expire_after = '1 day');
