"""The ``pg-ttl worker`` daemon: scheduling (croniter), coordination between workers,
signals, systemd notify, Prometheus metrics and structured logs.

Modules: ``config`` (file, environment, flags), ``schedule`` (when runs are due),
``daemon`` (the process and its database loops), ``sdnotify``, ``metrics``,
``logs``, ``status`` (what ``pg-ttl status`` reports), ``deploy`` (shipped unit file).
"""
