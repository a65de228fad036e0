"""TTL DDL: ``WITH (ttl_...)`` / ``SET (ttl_...)`` in CREATE and ALTER TABLE,
rewritten with pglast into plain PostgreSQL and calls of the ``ttl`` SQL API."""

from pg_ttl.ddl.rewrite import Statement, TtlDdlError, rewrite, rewrite_statements

__all__ = ["Statement", "TtlDdlError", "rewrite", "rewrite_statements"]
