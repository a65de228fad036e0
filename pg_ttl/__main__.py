import sys

from pg_ttl.cli import main

sys.exit(main())
