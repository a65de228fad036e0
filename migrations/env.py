"""Alembic environment for pg_ttl's own schema.

The version table is ``ttl.alembic_version``: a user's own ``alembic_version``
is never touched. After the migrations (tables), the code layer in ``sql/``
(functions, triggers, views: all idempotent) is applied in the same
transaction, so the database always runs the package's current SQL.
"""

from __future__ import annotations

from alembic import context

from pg_ttl.install import SCHEMA, VERSION_TABLE, code_layer_sql, execute_sql

config = context.config


def _configure_and_run(**kwargs: object) -> None:
    context.configure(
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
        **kwargs,  # type: ignore[arg-type]
    )
    with context.begin_transaction():
        # Serialise concurrent installs/upgrades of the same database.
        execute_sql("SELECT pg_catalog.pg_advisory_xact_lock(7438119)")
        execute_sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.run_migrations()
        if config.attributes.get("apply_code_layer", True):
            for statement in code_layer_sql():
                execute_sql(statement)


if context.is_offline_mode():
    _configure_and_run(url="postgresql+psycopg://", literal_binds=True)
else:
    _configure_and_run(connection=config.attributes["connection"])
