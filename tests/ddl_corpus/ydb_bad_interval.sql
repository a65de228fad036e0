-- an interval YDB would not read either
ALTER TABLE t SET (TTL = Interval("1 hour") ON created_at);
