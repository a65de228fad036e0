"""the adaptive throttle's default target: 1.25

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

from pg_ttl.install import execute_sql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# At 1.5 (others' statements up to 1.5 times slower, 90th percentile, while the engine
# works) an application's p99 during a throttled pass came out at 1.2-1.4 times its
# baseline on 2 cores; the goal is 1.25 (docs/benchmarks.md, "Adaptive throttle"). A
# database still at the old default gets the new one; a value set by hand is kept.
UPGRADE = """
UPDATE ttl.settings SET value = '1.25' WHERE name = 'throttle_target' AND value = '1.5';
"""

DOWNGRADE = """
UPDATE ttl.settings SET value = '1.5' WHERE name = 'throttle_target' AND value = '1.25';
"""


def upgrade() -> None:
    execute_sql(UPGRADE)


def downgrade() -> None:
    execute_sql(DOWNGRADE)
