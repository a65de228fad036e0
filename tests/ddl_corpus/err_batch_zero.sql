ALTER TABLE events SET (ttl_select_batch_size = 0);
