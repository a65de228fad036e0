-- YDB clause without ON column
ALTER TABLE t SET (fillfactor = 70,
                   TTL = Interval("PT1H") AS SECONDS);
