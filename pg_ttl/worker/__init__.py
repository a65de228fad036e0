"""The ``pg-ttl worker`` daemon: scheduling (croniter), coordination between workers,
signals, systemd notify, Prometheus metrics and structured logs.

Modules: ``config`` (file, environment, flags), ``schedule`` (when runs are due),
``daemon`` (the process: signals, systemd, reload, shutdown), ``loop`` (one
database's thread), ``rounds`` (catalog poll and runs through the engine, which it
reaches through ``pg_ttl.expire.seam``), ``lag`` (expiration lag), ``session``
(connecting, lost sessions, waits, heartbeats), ``shared`` (state they share),
``sdnotify``, ``metrics``, ``logs``, ``status`` (what ``pg-ttl status`` reports),
``deploy`` (shipped unit file).
"""
