"""Waking a sleeping thread, and asking a run to stop, from another thread or from a
signal handler: a self-pipe.

A signal handler must not take a lock. Python runs it in the main thread between two
bytecodes, possibly while that thread holds the very lock it would take: a
``threading.Event.set()`` in the SIGTERM handler hung the worker for good whenever the
signal came while the main loop was inside its own ``Event.wait()``; ``pg-ttl run`` hung
the same way when the signal came while the engine rested in ``stop.wait()``. A write to
a non-blocking pipe takes no lock.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
from typing import Protocol


def _readable(fds: list[int], seconds: float | None) -> set[int]:
    """The descriptors of ``fds`` readable within ``seconds`` (None: no limit). poll(), not
    select(): a worker serving many databases has descriptors past select()'s 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    timeout = None if seconds is None else max(0, math.ceil(seconds * 1000))
    return {fd for fd, _ in poller.poll(timeout)}


class Wakeup:
    """``wake()`` from any thread or signal handler; ``wait()`` in the thread that sleeps."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._closed = False

    def wake(self) -> None:
        if self._closed:  # the descriptor's number may already belong to another file
            return
        with contextlib.suppress(OSError):  # BlockingIOError: the pipe is full, so a wake-up is pending anyway
            os.write(self._w, b"x")

    def wait(self, seconds: float, fd: int | None = None) -> bool:
        """Sleep up to ``seconds``, or until ``wake()`` (True; pending wake-ups are consumed)
        or until ``fd`` is readable (False)."""
        if self._r not in _readable([self._r] if fd is None else [self._r, fd], seconds):
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass
        return True

    def fileno(self) -> int:
        """The pipe's read end: readable while a wake-up is pending."""
        return self._r

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._r)
            os.close(self._w)


class StopRequest(Protocol):
    """What the engine reads of a stop request: a ``threading.Event`` or a ``StopFlag``."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class StopFlag:
    """A stop request that a signal handler may set: ``is_set()`` and ``wait(timeout)`` as
    ``threading.Event``'s, from any thread. Once set it stays set (the byte written is never
    read back, so every waiter, now or later, wakes at once)."""

    def __init__(self) -> None:
        self._pipe = Wakeup()  # woken once by set() and never read: every wait() sees it
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._pipe.wake()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if not self._set:
            _readable([self._pipe.fileno()], timeout)
        return self._set

    def close(self) -> None:
        self._pipe.close()
