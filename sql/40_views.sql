-- Read side of the catalog, with tables and columns under their current names.
-- CREATE OR REPLACE: user views may depend on these; new columns go at the end.

CREATE OR REPLACE VIEW ttl.policies AS
SELECT p.relid,
       p.relid::regclass::text            AS table_name,
       n.nspname                          AS schema_name,
       c.relname                          AS relname,
       a.attname                          AS ttl_column,
       p.expiration_expression,
       p.expire_after,
       p.unit,
       p.job_cron,
       p.job_cron_override,
       p.select_batch_size,
       p.delete_batch_size,
       p.select_rate_limit,
       p.delete_rate_limit,
       p.paused,
       p.partition_action,
       p.detach_schema,
       (SELECT count(*) FROM ttl.column_policy cp WHERE cp.relid = p.relid) AS column_policies,
       p.created_at,
       p.updated_at,
       p.strict_visibility AS strict,
       p.value_ttl_overrides_table_ttl,
       (SELECT x.attname FROM pg_catalog.pg_attribute x
         WHERE x.attrelid = p.relid AND x.attnum = p.row_expiry_attnum AND NOT x.attisdropped) AS row_expiry_column,
       (SELECT x.attname FROM pg_catalog.pg_attribute x
         WHERE x.attrelid = p.relid AND x.attnum = p.row_write_attnum AND NOT x.attisdropped) AS row_write_column
  FROM ttl.policy p
  JOIN pg_catalog.pg_class c ON c.oid = p.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.relid AND a.attnum = p.ttl_attnum AND NOT a.attisdropped;


CREATE OR REPLACE VIEW ttl.column_policies AS
SELECT cp.relid,
       cp.relid::regclass::text AS table_name,
       a.attname                AS column_name,
       cp.expire_after,
       cp.created_at,
       cp.updated_at,
       cp.relative_to,
       (SELECT x.attname FROM pg_catalog.pg_attribute x
         WHERE x.attrelid = cp.relid AND x.attnum = cp.track_attnum AND NOT x.attisdropped) AS tracking_column
  FROM ttl.column_policy cp
  JOIN pg_catalog.pg_attribute a ON a.attrelid = cp.relid AND a.attnum = cp.attnum;

GRANT SELECT ON ttl.policies, ttl.column_policies TO PUBLIC;
