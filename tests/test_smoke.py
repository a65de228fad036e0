def test_db_has_pg_ttl(db):
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_plain_db_has_no_pg_ttl(plain_db):
    assert plain_db.execute("SELECT to_regnamespace('ttl')").fetchone() == (None,)
