"""``python -m bench.pgttl_api DSN TABLE…``: one pg_ttl pass through the Python API, in its own process.

The bench's stand-in for ``pg-ttl run --once`` while (or where) that command
is not available: same engine call, same process start-up cost. Prints one
JSON line per table with what the engine says it did.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from pg_ttl.expire import expire

    dsn, tables = argv[0], argv[1:]
    for r in expire(dsn, tables):
        print(json.dumps({"table": r.table, "status": r.status, "rows_deleted": r.rows_deleted,
                          "partitions_dropped": r.partitions_dropped, "duration_s": r.duration, "error": r.error,
                          "units": len(r.units)}))
        if r.status not in ("ok",):
            print(f"pg_ttl run of {r.table} ended {r.status}: {r.error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
