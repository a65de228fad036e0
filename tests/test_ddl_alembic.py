"""A user's own alembic migrations with op.enable_ttl / op.alter_ttl / op.disable_ttl /
op.execute_ttl: upgrade, then downgrade step by step back to the previous states."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from pg_ttl.alembic_ops import AlterTTLOp, DisableTTLOp, EnableTTLOp, ExecuteTTLOp, enable_sql

Conn = psycopg.Connection[Any]

ENV = '''
from alembic import context

import pg_ttl.alembic_ops  # noqa: F401  (registers op.enable_ttl, op.alter_ttl, ...)

if context.is_offline_mode():
    context.configure(url="postgresql+psycopg://", literal_binds=True, transactional_ddl=True)
else:
    context.configure(connection=context.config.attributes["connection"], transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
'''

REVISIONS = {
    "r1_events.py": '''
        from alembic import op

        revision = "r1"
        down_revision = None

        def upgrade():
            op.execute("CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
            op.enable_ttl("events", expire_after="30 days", column="created_at", job_cron="@daily",
                          strict=True)

        def downgrade():
            op.disable_ttl("events")
            op.execute("DROP TABLE events")
    ''',
    "r2_alter.py": '''
        from alembic import op
        from pg_ttl.alembic_ops import AlterTTLOp, ExecuteTTLOp

        revision = "r2"
        down_revision = "r1"

        ALTER = AlterTTLOp("events", delete_batch_size=500, pause=True, reset=["job_cron"],
                           existing={"delete_batch_size": 1000, "pause": False, "job_cron": "@daily"})
        USERS = ExecuteTTLOp(
            """CREATE TABLE users (id int PRIMARY KEY, email text) WITH (fillfactor = 80);
               ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days');
               SELECT 'a :colon and 100% literal';""",
            reverse_sql="ALTER TABLE users ALTER COLUMN email RESET (ttl); DROP TABLE users;")

        def upgrade():
            op.invoke(ALTER)
            op.execute_ttl(USERS.sql, reverse_sql=USERS.reverse_sql)

        def downgrade():
            op.invoke(USERS.reverse())
            op.invoke(ALTER.reverse())
    ''',
    "r3_disable.py": '''
        from alembic import op

        revision = "r3"
        down_revision = "r2"

        BEFORE = {"expire_after": "30 days", "column": "created_at", "delete_batch_size": 500, "pause": True,
                  "strict": True}

        def upgrade():
            op.disable_ttl("events", existing=BEFORE)

        def downgrade():
            op.enable_ttl("events", **BEFORE)
    ''',
}


@pytest.fixture
def user_alembic(tmp_path: Path) -> Path:
    root = tmp_path / "user_migrations"
    (root / "versions").mkdir(parents=True)
    (root / "env.py").write_text(ENV)
    (root / "script.py.mako").write_text("")
    for name, text in REVISIONS.items():
        (root / "versions" / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def run(user_alembic: Path, dsn: str) -> Iterator[Any]:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)

    def _run(action: str, revision: str) -> None:
        with engine.connect() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(user_alembic))
            cfg.attributes["connection"] = conn
            getattr(command, action)(cfg, revision)
            conn.commit()

    yield _run
    engine.dispose()


def _state(conn: Conn) -> dict[str, Any]:
    conn.rollback()
    state: dict[str, Any] = {}
    for table in ("events", "users"):
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        has_ttl = conn.execute("SELECT EXISTS (SELECT 1 FROM ttl.policy WHERE relid = to_regclass(%s)) "
                               "OR EXISTS (SELECT 1 FROM ttl.column_policy WHERE relid = to_regclass(%s))",
                               (table, table)).fetchone()
        if exists and exists[0] and has_ttl and has_ttl[0]:
            rows = conn.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()
            state[table] = {o: v for o, v in rows if o not in ("created_at", "updated_at")}
        else:
            state[table] = "table" if exists and exists[0] else None
    state["version"] = conn.execute("SELECT version_num FROM public.alembic_version").fetchone() \
        if conn.execute("SELECT to_regclass('public.alembic_version')").fetchone() != (None,) else None
    return state


def test_upgrade_and_downgrade_restore_each_state(db: Conn, run: Any) -> None:
    ttl_version = db.execute("SELECT version_num FROM ttl.alembic_version").fetchone()
    base = _state(db)
    assert base == {"events": None, "users": None, "version": None}

    run("upgrade", "r1")
    s1 = _state(db)
    assert s1["events"]["ttl_expire_after"] == "30 days" and s1["events"]["ttl_job_cron"] == "@daily"
    assert s1["events"]["ttl_strict"] == "true"
    assert s1["version"] == ("r1",)

    run("upgrade", "r2")
    s2 = _state(db)
    ev = s2["events"]
    assert (ev["ttl_delete_batch_size"], ev["ttl_pause"], ev["ttl_job_cron"]) == ("500", "true", "@hourly")
    assert s2["users"]["column email: ttl_expire_after"] == "90 days"
    assert db.execute("SELECT reloptions FROM pg_class WHERE relname = 'users'").fetchone() == (["fillfactor=80"],)

    run("upgrade", "r3")
    s3 = _state(db)
    assert s3["events"] == "table" and s3["version"] == ("r3",)

    run("downgrade", "r2")
    assert _state(db) == s2
    run("downgrade", "r1")
    assert _state(db) == s1
    run("downgrade", "base")
    assert _state(db) == {"events": None, "users": None, "version": None}
    # The user's alembic_version is their own; pg_ttl's stays where it was.
    assert db.execute("SELECT version_num FROM ttl.alembic_version").fetchone() == ttl_version


def test_failed_migration_changes_nothing(db: Conn, run: Any, user_alembic: Path) -> None:
    (user_alembic / "versions" / "r4_bad.py").write_text(textwrap.dedent('''
        from alembic import op

        revision = "r4"
        down_revision = "r3"

        def upgrade():
            op.execute_ttl("ALTER TABLE events SET (ttl_expire_after = '1 day', ttl_column = 'created_at')")
            op.alter_ttl("events", column="no_such_column")

        def downgrade():
            pass
    '''))
    run("upgrade", "r3")
    s3 = _state(db)
    with pytest.raises(Exception, match="no_such_column"):
        run("upgrade", "r4")
    assert _state(db) == s3


def test_offline_sql(user_alembic: Path) -> None:
    out = io.StringIO()
    cfg = Config(output_buffer=out)
    cfg.set_main_option("script_location", str(user_alembic))
    command.upgrade(cfg, "r2", sql=True)
    text = out.getvalue()
    assert ("SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at', "
            "job_cron => '@daily');") in text
    assert "SELECT ttl.enable_column('users', 'email', '90 days');" in text
    assert "SELECT 'a :colon and 100% literal';" in text


def test_operations_check_and_reverse() -> None:
    with pytest.raises(ValueError, match="unknown TTL option 'expire'"):
        EnableTTLOp("t", expire="1 day")
    with pytest.raises(ValueError, match='must be set'):
        enable_sql("t", None, {"column": "at"})
    with pytest.raises(ValueError, match="must be an interval"):
        enable_sql("t", None, {"expire_after": "soon"})
    assert enable_sql("My T", "s", {"expiration_expression": "x"}) == (
        "SELECT ttl.enable('s.\"My T\"', expiration_expression => 'x')")
    assert enable_sql("t", None, {"expire_after": "1 day", "strict": True}) == (
        "SELECT ttl.enable('t', expire_after => '1 day');\nALTER TABLE t SET (ttl_strict = 'true')")
    op = EnableTTLOp("t", expire_after="1 day", column="at")
    back = op.reverse()
    assert isinstance(back, DisableTTLOp) and back.existing == {"expire_after": "1 day", "column": "at"}
    assert back.reverse().options == op.options
    with pytest.raises(ValueError, match="existing="):
        DisableTTLOp("t").reverse()
    alter = AlterTTLOp("t", pause=True, reset=["job_cron", "delete_batch_size"],
                       existing={"pause": False, "job_cron": "@daily"})
    rev = alter.reverse()
    assert rev.options == {"pause": False, "job_cron": "@daily"} and rev.reset == ["delete_batch_size"]
    assert ExecuteTTLOp("a", reverse_sql="b").reverse().sql == "b"
