"""Alembic environment for pg_ttl's own schema.

The version table is ``ttl.alembic_version``: a user's own ``alembic_version``
is never touched. After the migrations (tables), the code layer in ``sql/``
(functions, triggers, views) is replayed in the same transaction (see
pg_ttl/install.py: replay_code_layer), so the database always runs the
package's current SQL.
"""

from __future__ import annotations

from alembic import context
from alembic.script import ScriptDirectory

from pg_ttl.code_layer import prepare_downgrade, replay_code_layer
from pg_ttl.install import SCHEMA, VERSION_TABLE, execute_sql

config = context.config


def _target_is_head() -> bool:
    target = context.get_revision_argument()
    heads = ScriptDirectory.from_config(config).get_heads()
    return target in ("head", "heads") or target in heads or (isinstance(target, tuple) and set(target) == set(heads))


def _configure_and_run(**kwargs: object) -> None:
    context.configure(
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transactional_ddl=True,
        **kwargs,  # type: ignore[arg-type]
    )
    with context.begin_transaction():
        # Serialise concurrent installs/upgrades of the same database.
        # Never queue forever behind a long transaction that reads the catalog:
        # fail with a clear error instead, and leave everything as it was.
        execute_sql(f"SET LOCAL lock_timeout = '{int(config.attributes.get('lock_timeout_ms', 30000))}ms'")
        execute_sql("SELECT pg_catalog.pg_advisory_xact_lock(7438119)")
        execute_sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        # Which drop-list entries apply depends on where the database started.
        before = None if context.is_offline_mode() else context.get_context().get_current_revision()
        if _target_is_head():
            context.run_migrations()
            # The code layer is the package's current SQL: it matches the head
            # revision's tables only, so it is applied when upgrading to head.
            replay_code_layer(before)
        else:
            # Below head (a downgrade, or a step of a stepwise install) the views and
            # event triggers would read columns or tables that may be gone; the next
            # upgrade to head recreates them.
            prepare_downgrade()
            context.run_migrations()


if context.is_offline_mode():
    _configure_and_run(url="postgresql+psycopg://", literal_binds=True)
else:
    _configure_and_run(connection=config.attributes["connection"])
