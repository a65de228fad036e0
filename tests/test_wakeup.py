"""pg_ttl/wakeup.py: waking a thread and stopping a run from a signal handler, which must take no lock.

Each case runs in a child process flooded with signals whose handler wakes or sets the object the
main thread is waiting on, over and over. threading.Event in their place hangs within seconds:
the handler runs between two bytecodes of Event.wait() while that thread holds the Event's lock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pg_ttl.wakeup import StopFlag, Wakeup

    kind = sys.argv[1]
    current = [StopFlag() if kind == "stop" else Wakeup()]
    signals = [0]

    def handler(signum, frame):
        signals[0] += 1
        current[0].set() if kind == "stop" else current[0].wake()

    signal.signal(signal.SIGUSR1, handler)
    parent = os.getpid()
    if os.fork() == 0:  # the flood: a signal every 0.1-0.5 ms for 3 s
        end = time.monotonic() + 3
        i = 0
        while time.monotonic() < end:
            os.kill(parent, signal.SIGUSR1)
            time.sleep(0.0001 * (1 + i % 5))
            i += 1
        os._exit(0)
    woken = 0
    end = time.monotonic() + 3
    while time.monotonic() < end:
        if kind == "stop":
            flag = current[0]
            if flag.wait(0.0001):
                woken += 1
                current[0] = StopFlag()
                flag.close()
        elif current[0].wait(0.0001):
            woken += 1
    os.wait()
    print(signals[0], woken)
""")


@pytest.mark.parametrize("kind", ["stop", "wake"])
def test_set_from_a_signal_handler_never_hangs(kind: str) -> None:
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{kind}: the process hung under signals") from None
    signals, woken = map(int, out.split())
    # thousands of signals, each handled; the waits saw them (several may fold into one wake-up)
    assert signals > 1000 and woken > 100, (signals, woken)


def test_stop_flag_wakes_every_waiter_and_stays_set() -> None:
    import threading
    import time

    from pg_ttl.wakeup import StopFlag

    flag = StopFlag()
    assert not flag.is_set() and flag.wait(0.01) is False
    woke: list[float] = []
    threads = [threading.Thread(target=lambda: woke.append(flag.wait(10) and time.monotonic())) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    set_at = time.monotonic()
    flag.set()
    for t in threads:
        t.join(5)
    assert len(woke) == 3 and all(w and w - set_at < 1 for w in woke)
    assert flag.is_set() and flag.wait(0) is True and flag.wait(None) is True
    flag.close()


def test_waits_work_with_descriptors_past_1024() -> None:
    """A worker serving many databases holds over 1,024 descriptors: select() refuses those
    (ValueError: filedescriptor out of range)."""
    import os
    import resource
    import time

    from pg_ttl.wakeup import StopFlag, Wakeup

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        wakeup, flag = Wakeup(), StopFlag()
        r, w = os.pipe()
        assert min(r, w) > 1024
        started = time.monotonic()
        assert wakeup.wait(0.05, r) is False and flag.wait(0.05) is False
        assert time.monotonic() - started >= 0.1
        wakeup.wake()
        flag.set()
        assert wakeup.wait(5, r) is True and flag.wait(5) is True
        os.write(w, b"x")
        assert wakeup.wait(5, r) is False  # the other descriptor became readable: not a wake-up
        for fd in (r, w):
            os.close(fd)
        wakeup.close()
        flag.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
