-- YDB's TTL clause (https://ydb.tech/docs/en/yql/reference/recipes/ttl)
SELECT ttl.set_options('mytable', CAST('{"expire_after": "PT1H", "column": "created_at"}' AS jsonb));
SELECT ttl.set_options('mytable', CAST('{"expire_after": "PT1H", "column": "modified_at", "unit": "seconds"}' AS jsonb));
CREATE TABLE newtable (id bigint, expire_at timestamptz, PRIMARY KEY (id));
SELECT ttl.set_options('newtable', CAST('{"expire_after": "PT0S", "column": "expire_at"}' AS jsonb));
SELECT ttl.set_options('tiered', CAST('{"expire_after": "P30D", "column": "created_at", "tiers": "P1D TO cold"}' AS jsonb));
SELECT 'TTL = Interval("PT1H") ON x' AS kept_byte_for_byte;
SELECT ttl.disable('mytable');
