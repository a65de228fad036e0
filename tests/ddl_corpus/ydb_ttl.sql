-- YDB's TTL clause (https://ydb.tech/docs/en/yql/reference/recipes/ttl)
ALTER TABLE mytable SET (TTL = Interval("PT1H") ON created_at);
ALTER TABLE mytable SET (TTL = Interval("PT1H") ON modified_at AS SECONDS);
CREATE TABLE newtable (
    id bigint,
    expire_at timestamptz,
    PRIMARY KEY (id)
) WITH (
    TTL = Interval("PT0S") ON expire_at
);
ALTER TABLE tiered SET (TTL = Interval('P1D') TO EXTERNAL DATA SOURCE cold, Interval('P30D') DELETE ON created_at);
SELECT 'TTL = Interval("PT1H") ON x' AS kept_byte_for_byte;
ALTER TABLE mytable RESET (TTL);
