"""systemd's notify protocol (sd_notify(3)) with the standard library only.

systemd passes the socket in ``$NOTIFY_SOCKET``: a filesystem path, or an
abstract socket written with a leading ``@``. Messages are newline-separated
``KEY=VALUE`` assignments in one datagram. Without the variable (not under
systemd) every call is a no-op, so the worker can always call it.
"""

from __future__ import annotations

import os
import socket
import threading


class SystemdNotifier:
    """Send READY=1, STATUS=..., WATCHDOG=1, STOPPING=1 to systemd, if it is listening."""

    def __init__(self, address: str | None = None) -> None:
        self.address = os.environ.get("NOTIFY_SOCKET") if address is None else address
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.last_error: OSError | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def _target(self) -> str:
        assert self.address
        # Abstract namespace: '@name' on the wire is '\0name'.
        return "\0" + self.address[1:] if self.address.startswith("@") else self.address

    def notify(self, **fields: str | int) -> bool:
        """Send one datagram; True when sent. Errors are kept, never raised: systemd is advisory."""
        if not self.address:
            return False
        payload = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.sendto(payload, self._target())
                return True
            except OSError as exc:
                self.last_error = exc
                return False

    def ready(self, status: str | None = None) -> bool:
        return self.notify(READY=1, **({"STATUS": status} if status else {}))

    def status(self, text: str) -> bool:
        # STATUS is one line; systemd shows it in `systemctl status`.
        return self.notify(STATUS=text.replace("\n", " "))

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str | None = None) -> bool:
        return self.notify(STOPPING=1, **({"STATUS": status} if status else {}))

    def reloading(self) -> bool:
        return self.notify(RELOADING=1)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings: half of $WATCHDOG_USEC, as sd_watchdog_enabled(3) advises.

    None when systemd does not watch this process (unset, or meant for another pid).
    """
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2_000_000 if value > 0 else None
