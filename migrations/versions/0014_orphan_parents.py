"""orphans: several parents (a child row is an orphan when none of them has its key)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from pg_ttl.install import execute_sql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# ttl.orphan_policy.parent_relid becomes parent_relids, the parents in order;
# parent_attnums holds their key columns one parent after the other (each as
# many as key_attnums: the k-th parent's are parent_attnums[(k-1)*n+1 : k*n]).
# A type change, not an UPDATE: the policies' validation trigger stays out of it.
# pg_ttl's event triggers go first: the old ones read parent_relid and would fire
# on the drops that follow (here and in the code layer's replay, which recreates
# them at its end, in this same transaction).
UPGRADE = """
DROP EVENT TRIGGER IF EXISTS pg_ttl_sql_drop;
DROP EVENT TRIGGER IF EXISTS pg_ttl_ddl_end;
DROP EVENT TRIGGER IF EXISTS pg_ttl_create_table;
DROP INDEX ttl.orphan_policy_parent;
ALTER TABLE ttl.orphan_policy RENAME COLUMN parent_relid TO parent_relids;
ALTER TABLE ttl.orphan_policy ALTER COLUMN parent_relids TYPE oid[] USING ARRAY[parent_relids];
CREATE INDEX orphan_policy_parents ON ttl.orphan_policy USING gin (parent_relids);
"""

# Back to one parent: the first one.
DOWNGRADE = """
DROP INDEX ttl.orphan_policy_parents;
ALTER TABLE ttl.orphan_policy
    ALTER COLUMN parent_attnums TYPE smallint[] USING parent_attnums[1:cardinality(key_attnums)],
    ALTER COLUMN parent_relids TYPE oid USING parent_relids[1];
ALTER TABLE ttl.orphan_policy RENAME COLUMN parent_relids TO parent_relid;
CREATE INDEX orphan_policy_parent ON ttl.orphan_policy (parent_relid);
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
