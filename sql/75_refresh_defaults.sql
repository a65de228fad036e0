-- Expiry DEFAULTs written by an older pg_ttl. Until 2026-11-28 the DEFAULT of a
-- per-row TTL's expiry column (and of a write-time column TTL's tracking
-- column) added the TTL in the writer's TimeZone: a '1 day' TTL written the day
-- before clocks go forward lived 23 hours. The trigger functions are replaced
-- with the code layer on every upgrade; a column's DEFAULT is stored with the
-- table, so it stays as it was written until the policy changes. On upgrade,
-- the tables still carrying such a DEFAULT get theirs (and their triggers)
-- written again from this version's definitions (ttl._sync_table).

-- Has tbl an expiry DEFAULT that adds the TTL in the writer's TimeZone? The old
-- forms deparse as "now() + <ttl>"; the current ones add it to
-- timezone('UTC', now()), deparsed "now()) + <ttl>".
-- Or one that reads the per-write TTL (pg_ttl.row_ttl) itself? Until 2026-11-29
-- the DEFAULTs added a negative setting to now() (rows written already expired);
-- the current ones leave that to ttl.row_expires_at, which refuses it.
CREATE OR REPLACE FUNCTION ttl._expiry_defaults_stale(tbl oid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT EXISTS (
        SELECT 1 FROM pg_attrdef d
         WHERE d.adrelid = tbl
           AND (d.adnum IN (SELECT p.row_expiry_attnum FROM ttl.policy p WHERE p.relid = tbl)
                OR d.adnum IN (SELECT c.track_attnum FROM ttl.column_policy c
                                WHERE c.relid = tbl AND c.relative_to = 'write'))
           AND (pg_get_expr(d.adbin, d.adrelid) ~ 'now\(\) \+'
                OR pg_get_expr(d.adbin, d.adrelid) !~ 'row_expires_at\('))
$fn$;

SELECT ttl._sync_table(t.relid)
  FROM (SELECT p.relid FROM ttl.policy p WHERE p.row_expiry_attnum IS NOT NULL
        UNION SELECT c.relid FROM ttl.column_policy c WHERE c.relative_to = 'write') t
  JOIN pg_class c ON c.oid = t.relid
 WHERE ttl._expiry_defaults_stale(t.relid);
