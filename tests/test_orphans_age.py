"""Orphan policies without an age column: a child row goes only once the transaction
that wrote it had ended before a sample of the xid clock taken at least min_age
before the run (sql/80_orphans.sql), so a child written before its parent survives
while the parent follows within min_age."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire

Conn = psycopg.Connection[Any]

SCHEMA = """
CREATE TABLE metadata (hash text PRIMARY KEY);
CREATE TABLE data (id bigserial PRIMARY KEY, hash text NOT NULL, body text);
"""


def _setup(db: Conn) -> Conn:
    db.execute(SCHEMA)
    db.commit()
    db.autocommit = True
    return db


def _hashes(conn: Conn) -> list[str]:
    return sorted(r[0] for r in conn.execute("SELECT hash FROM data"))


def _first_sample(conn: Conn) -> datetime:
    row = conn.execute("SELECT min(sampled_at) FROM ttl.xid_clock").fetchone()
    assert row is not None and row[0] is not None
    return row[0]


def test_a_row_goes_once_written_before_a_clock_sample_min_age_old(db: Conn, dsn: str, cli: Any) -> None:
    """Before a sample min_age old exists nothing goes (and status and plan say so);
    then the orphans written before that sample go, and not those written after it, nor
    an old row updated after it (an update counts as a write)."""
    conn = _setup(db)
    conn.execute("INSERT INTO metadata VALUES ('p')")
    conn.execute("INSERT INTO data (hash) VALUES ('p'), ('before'), ('updated')")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '1 second')")
    sample = _first_sample(conn)  # the policy's first sample of the clock
    assert conn.execute("SELECT age_attnum FROM ttl.orphan_policy").fetchone() == (None,)
    conn.execute("INSERT INTO data (hash) VALUES ('after')")
    conn.execute("UPDATE data SET body = 'x' WHERE hash = 'updated'")
    time.sleep(1.2)

    # a cutoff just short of the sample's time + min_age: no sample is old enough
    [early] = expire(dsn, ["data"], cutoff=sample + timedelta(seconds=1) - timedelta(microseconds=1))
    assert early.status == "ok" and early.orphans_deleted == 0
    assert _hashes(conn) == ["after", "before", "p", "updated"]
    row = conn.execute("SELECT ttl.orphans_waiting('data'::regclass, %s)", (sample,)).fetchone()
    assert row is not None and row[0] is not None and "no age column" in row[0]

    # at the sample's time + min_age: the orphan written before it goes
    [first] = expire(dsn, ["data"], cutoff=sample + timedelta(seconds=1))
    assert first.status == "ok" and first.orphans_deleted == 1
    assert _hashes(conn) == ["after", "p", "updated"]

    # later passes took samples after the last writes; min_age on, those go too
    time.sleep(1.2)
    [later] = expire(dsn, ["data"])
    assert later.status == "ok" and later.orphans_deleted == 2
    assert _hashes(conn) == ["p"]

    # the commands say how the rule stands
    status = cli("orphans", "status", "data", "--dsn", dsn)
    assert status.returncode == 0, status.stderr
    assert "no age column" in status.stdout and "transaction" in status.stdout


def test_a_child_written_before_its_parent_survives_passes(db: Conn, dsn: str) -> None:
    """A child committed in one transaction, its parent 1.5 s later in another, with
    passes (each sampling the clock) all along and min_age 2 s: the child stays; an
    orphan written before both goes once min_age has passed."""
    conn = _setup(db)
    conn.execute("INSERT INTO data (hash) VALUES ('orphan')")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '2 seconds')")
    conn.execute("INSERT INTO data (hash) VALUES ('child')")
    written = time.monotonic()
    parent_written = False
    deleted = 0
    while time.monotonic() < written + 4.5:
        if not parent_written and time.monotonic() >= written + 1.5:
            conn.execute("INSERT INTO metadata VALUES ('child')")
            parent_written = True
        [res] = expire(dsn, ["data"])
        assert res.status == "ok", res.error
        deleted += res.orphans_deleted
        assert "child" in _hashes(conn), "a child whose parent followed within min_age was deleted"
        time.sleep(0.05)
    assert parent_written and deleted == 1 and _hashes(conn) == ["child"]


def test_a_transaction_open_across_the_sample_keeps_its_rows(db: Conn, dsn: str, connect: Any) -> None:
    """A row inserted before a sample by a transaction that commits after it is not
    older than the sample: the sample records the oldest transaction still running."""
    conn = _setup(db)
    writer = connect(autocommit=False)
    writer.execute("INSERT INTO data (hash) VALUES ('open')")  # its transaction stays open
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '1 second')")
    sample = _first_sample(conn)
    conn.execute("INSERT INTO data (hash) VALUES ('closed')")  # committed after the sample too
    writer.commit()
    time.sleep(1.1)
    [res] = expire(dsn, ["data"], cutoff=sample + timedelta(seconds=1))
    assert res.status == "ok" and res.orphans_deleted == 0
    assert _hashes(conn) == ["closed", "open"]


def test_only_the_tables_owners_write_its_clock(db: Conn, connect: Any) -> None:
    """A forged sample (old time, recent xid) would make young rows old: other roles
    read a table's clock but cannot write it."""
    conn = _setup(db)
    conn.execute("CREATE ROLE clock_user LOGIN")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '1 hour')")
    other = connect(user="clock_user")
    assert other.execute("SELECT count(*) FROM ttl.xid_clock WHERE relid = 'data'::regclass").fetchone() == (1,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        other.execute("INSERT INTO ttl.xid_clock VALUES ('data'::regclass, now() - interval '1 day',"
                      " pg_current_xact_id())")
    other.execute("DELETE FROM ttl.xid_clock")  # nothing of another owner's goes
    assert conn.execute("SELECT count(*) FROM ttl.xid_clock").fetchone() == (1,)
    conn.execute("SELECT ttl.disable_orphans('data')")  # the policy's clock goes with it
    assert conn.execute("SELECT count(*) FROM ttl.xid_clock").fetchone() == (0,)


def test_no_age_column_through_ttl_ddl_the_command_line_and_dump(db: Conn, dsn: str, cli: Any) -> None:
    from pg_ttl.ddl.apply import apply
    from pg_ttl.ddl.dump import dump

    conn = _setup(db)
    apply(conn, "ALTER TABLE data SET (ttl_orphan_of = 'metadata(hash)', ttl_orphan_key = 'hash',"
                " ttl_orphan_min_age = '2 hours');", "orphans.sql")
    assert conn.execute("SELECT age_attnum, min_age::text FROM ttl.orphan_policy").fetchone() == (None, "02:00:00")
    text = dump(conn)
    assert "ttl_orphan_of = 'public.metadata(hash)'" in text and "ttl_orphan_age_column" not in text
    conn.execute("SELECT ttl.disable_orphans('data')")
    apply(conn, text, "dump.sql")
    assert conn.execute("SELECT age_attnum, min_age::text FROM ttl.orphan_policy").fetchone() == (None, "02:00:00")
    conn.execute("SELECT ttl.disable_orphans('data')")
    res = cli("orphans", "set", "data", "--key", "hash", "--parent", "metadata", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert conn.execute("SELECT age_attnum, min_age::text FROM ttl.orphan_policy").fetchone() == (None, "01:00:00")
    # the plan says nothing goes yet, and why
    plan = cli("orphans", "plan", "data", "--dsn", dsn)
    assert plan.returncode == 0, plan.stderr
    assert "no age column: orphans are deleted from" in plan.stdout
