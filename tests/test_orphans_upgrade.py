"""A database with orphan policies, a sweep in progress and run history at the schema
of migration 0013 (one parent per policy, an age column required), upgraded to head:
the policies keep working, and the sweep is taken up where it stopped."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg

from pg_ttl import install
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer
from tests.helpers import StopAfter

TABLES = """
CREATE TABLE metadata (hash text PRIMARY KEY);
CREATE TABLE data (hash text NOT NULL, body text, created_at timestamptz NOT NULL);
INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, 20000) g WHERE g % 4 = 0;
INSERT INTO data SELECT 'k' || g, repeat('x', 200), now() - interval '1 day' FROM generate_series(1, 20000) g;
CREATE TABLE owners (a int, b text, PRIMARY KEY (a, b));
CREATE TABLE items (x int, y text, made timestamptz);
INSERT INTO owners VALUES (1, 'a');
INSERT INTO items VALUES (1, 'a', now() - interval '1 day'), (2, 'b', now() - interval '1 day'),
                         (3, 'c', now());
"""
# What ttl.enable_orphans wrote at revision 0013 (one parent, parent_relid), written as
# it was: the validation trigger and event triggers of the code now installed expect
# the newer columns, and must not run on it (session_replication_role = replica).
AT_0013 = """
SET session_replication_role = replica;
INSERT INTO ttl.orphan_policy (relid, key_attnums, parent_relid, parent_attnums, min_age, age_attnum, age_unit,
                               job_cron, range_bytes, delete_batch_size)
VALUES ('items'::regclass, '{1,2}', 'owners'::regclass, '{1,2}', '1 hour', 3, NULL, NULL, 67108864, 1000);
RESET session_replication_role;
"""


def _orphans(conn: psycopg.Connection[Any], child: str, where: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {child} WHERE {where}").fetchone()
    assert row is not None
    return int(row[0])


def test_orphan_policies_at_0013_work_after_the_upgrade(pg_local: LocalServer) -> None:
    db = pg_local.create_database(f"orph_up_{uuid.uuid4().hex[:8]}")
    install.upgrade(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(TABLES)
        conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                     " delete_batch_size => 200, range_bytes => 262144)")
        # a sweep in progress: a pass stopped part-way, its ranges and run history recorded
        stop = threading.Event()

        [first] = expire(db, ["data"], stop=stop, progress=StopAfter(stop, 5))
        assert first.status == "partial" and 0 < first.orphans_deleted < 15000
        last = conn.execute("SELECT range_no, next_block, end_block, status FROM ttl.block_range"
                            " ORDER BY range_no DESC LIMIT 1").fetchone()
        assert last is not None and last[3] in ("partial", "ok")
        # where the next pass starts: in the range stopped in, or at the next one's first block
        stopped = (last[0], last[1]) if last[3] == "partial" else (last[0] + 1, last[2])

    assert install.downgrade(db, "0013") == "0013"
    with psycopg.connect(db, autocommit=True) as conn:
        columns = {r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attnum > 0 AND"
                                              " attrelid = 'ttl.orphan_policy'::regclass AND NOT attisdropped")}
        assert "parent_relid" in columns and "parent_relids" not in columns
        assert conn.execute("SELECT to_regclass('ttl.xid_clock')").fetchone() == (None,)
        conn.execute(AT_0013)
        assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (2,)

    result = install.upgrade(db)
    assert result.before == "0013" and result.after == install.head_revision()
    with psycopg.connect(db, autocommit=True) as conn:
        policies = conn.execute("SELECT relid::regclass::text, parent_relids::regclass[]::text, age_attnum"
                                " FROM ttl.orphan_policy ORDER BY 1").fetchall()
        assert policies == [("data", "{metadata}", 3), ("items", "{owners}", 3)]
        described = dict(conn.execute("SELECT option, value FROM ttl.describe('items')").fetchall())
        assert described["ttl_orphan_of"] == "public.owners(a, b)"
        results = {r.table: r for r in expire(db, ["data", "items"])}
        assert results["data"].status == "ok" and results["items"].status == "ok"
        # the sweep in progress is taken up where the stopped pass left it
        resumed = conn.execute("SELECT range_no, first_block FROM ttl.block_range WHERE run_id = %s"
                               " ORDER BY range_no LIMIT 1", (results["data"].run_id,)).fetchone()
        assert resumed == stopped
        assert first.orphans_deleted + results["data"].orphans_deleted == 15000
        assert _orphans(conn, "data d", "NOT EXISTS (SELECT 1 FROM metadata m WHERE m.hash = d.hash)") == 0
        assert _orphans(conn, "data", "true") == 5000
        # (2, 'b') had no owner; (3, 'c') is younger than min_age
        assert sorted(conn.execute("SELECT x, y FROM items").fetchall()) == [(1, "a"), (3, "c")]
        # and what the upgrade added works: a policy without an age column
        conn.execute("SELECT ttl.enable_orphans('items', '{x, y}', 'owners', '{a, b}')")
        assert conn.execute("SELECT age_attnum FROM ttl.orphan_policy WHERE relid = 'items'::regclass"
                            ).fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM ttl.xid_clock").fetchone() == (1,)
