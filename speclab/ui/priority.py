"""The app yields the CPU to the load generator: it must never perturb the traffic it measures.

Traffic workers are separate processes; what the app can do unprivileged is lower its own
priority (raising the workers' needs privileges). Linux keeps a nice value per thread, so only the
app's event-loop thread is lowered, once the workers and servers it started are running: the
executor threads that spawn workers keep theirs. A server the app relaunches later is started from
the event loop and inherits the lowered value (its clock-drift gauge shows if that starves it).
Under load the app also repaints less often (``RenderCap``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

UI_NICE = 10  # added to the event-loop thread's nice value
FULL_RATE_S = 0.25  # the snapshot rate: a repaint per snapshot while the client keeps up
LOADED_RATE_S = 1.0  # at most one repaint a second while the client reports saturation


def lower_ui_priority(increment: int = UI_NICE) -> int | None:
    """Add ``increment`` to this thread's nice value; the new value, or None where it cannot."""
    if not hasattr(os, "setpriority"):
        return None
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + increment))
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        return None


class RenderCap:
    """Whether to repaint now: always while the client keeps up, at most every ``LOADED_RATE_S``
    while it is saturated (the state keeps every snapshot, so a skipped repaint loses nothing)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = -1e9

    def due(self, loaded: bool) -> bool:
        now = self._clock()
        if loaded and now - self._last < LOADED_RATE_S:
            return False
        self._last = now
        return True
