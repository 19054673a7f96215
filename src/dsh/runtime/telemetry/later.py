"""Work the event loop hands to a thread of its own: telemetry's recording after the fact.

Making a finished model request's span, ending a tool call's or a turn's, and recording
their measurements costs tens of microseconds each in the OpenTelemetry SDK (attribute
checks, hashing, locks). None of it decides anything the turn waits for, so the hooks
queue it here (a deque append) and :class:`Later`'s thread does it, in order, within
``interval`` seconds (0.2: telemetry is in no hurry, and each wake-up shares the
interpreter with a loop that may be busy); it mostly runs while the loop waits (a model
streaming, a command running, a database write), and offers the interpreter back after
each call. :meth:`Later.close` does what is left before returning.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("dsh.telemetry")


class Later:
    """A FIFO of calls run on one daemon thread at most ``interval`` seconds after queued."""

    def __init__(self, interval: float = 0.2) -> None:
        self._queue: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque())
        self._interval = interval
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._work, name="dsh-telemetry", daemon=True)
        self._thread.start()

    def __call__(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)``: it runs on the thread, after everything queued before."""
        self._queue.append((fn, args))

    def close(self, timeout: float = 1.0) -> None:
        """Stop the thread, then run what is still queued here (in order)."""
        self._closed.set()
        self._thread.join(timeout)
        self._drain(yielding=False)

    def _work(self) -> None:
        while not self._closed.wait(self._interval):
            self._drain()

    def _drain(self, *, yielding: bool = True) -> None:
        """Run what is queued, in order; ``yielding``: offer the interpreter to the loop's
        thread after each call, so a turn waits on at most one call, not on the batch
        (a thread holding the GIL keeps it up to the switch interval, 5 ms)."""
        while True:
            try:
                fn, args = self._queue.popleft()
            except IndexError:
                return
            try:
                fn(*args)
            except Exception:
                logger.exception("telemetry: recording %s failed", getattr(fn, "__name__", fn))
            if yielding:
                time.sleep(0)
