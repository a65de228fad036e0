ALTER TABLE events SET (ttl_delete_batch_size = 10.5);
