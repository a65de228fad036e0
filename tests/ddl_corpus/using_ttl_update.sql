UPDATE pageviews
   USING TTL 0
   SET views = 10 WHERE id = 1;
