"""A deadline for the process itself: once armed, the process exits by then, whatever
its event loop is doing.

A worker that crashed or was asked to stop must end within a bound (an orchestrator
restarts it, and its partitions move to healthy members only once its consumer is
gone). Stopping a Faust app awaits many things (flushes, producers, the consumer
group); any of them can wait on a broker that is gone. A thread outside the event loop
guarantees the bound without having to trust every one of those awaits.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger("loopwarden.worker")

_lock = threading.Lock()
_deadline: float | None = None


def arm(seconds: float, code: int, why: str) -> None:
    """Exit the process with `code` in `seconds` unless it has exited by then. Arming
    again keeps the earlier deadline."""
    global _deadline
    with _lock:
        at = time.monotonic() + seconds
        if _deadline is not None and _deadline <= at:
            return
        _deadline = at

    def expire() -> None:
        time.sleep(seconds)
        with _lock:
            if _deadline != at:  # a nearer deadline was armed since
                return
        msg = f"loopwarden: {why}; the worker did not stop within {seconds:.0f}s, exiting with {code}\n"
        try:
            sys.stderr.write(msg)
            sys.stderr.flush()
        finally:
            os._exit(code)

    threading.Thread(target=expire, name="loopwarden-stop-deadline", daemon=True).start()


def armed() -> bool:
    return _deadline is not None
