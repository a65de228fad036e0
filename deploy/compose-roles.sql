-- Roles of the docker-compose.yml demo; the postgres image runs this once, when it
-- creates the cluster (mounted into /docker-entrypoint-initdb.d/). Passwords are for
-- the demo only.
--
-- app: owns the application's tables (and so manages their TTL).
CREATE ROLE app LOGIN PASSWORD 'app';
GRANT CREATE ON SCHEMA public TO app;

-- ttl_worker: what pg-ttl worker connects as (docs/worker.md): not a superuser,
-- no BYPASSRLS, NOINHERIT; a member of each role owning a TTL table, so the
-- engine can do each table's work as its owner (SET ROLE).
CREATE ROLE ttl_worker LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT PASSWORD 'ttl_worker';
GRANT app TO ttl_worker;
