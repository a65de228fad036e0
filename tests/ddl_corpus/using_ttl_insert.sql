INSERT INTO pageviews (id, views) VALUES (1, 10) USING TTL 10;
