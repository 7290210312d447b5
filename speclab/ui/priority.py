"""The app yields the CPU to the load generator: it must never perturb the traffic it measures.

Traffic workers are separate processes; what the app can do unprivileged is lower its own
priority (raising the workers' needs privileges). Linux keeps a nice value per thread, so only the
app's event-loop thread is lowered, once the workers and servers it started are running, and by
a little (``UI_NICE``: the workers then weigh about three times the app when both want a core;
+10 left the app a tenth of a core beside two busy neighbours, too little to reach its own quit).
Children (servers relaunched from the loop, workers) are started from the launching thread,
begun before the lowering (``speclab.servers.launcher``), so they never inherit it; when traffic
ends or the user quits, the thread's priority is put back where the system allows it.
Under load the app also repaints less often (``RenderCap``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from speclab.servers import launcher

UI_NICE = 5  # added to the event-loop thread's nice value
LOADED_RATE_S = 1.0  # at most one repaint a second while the client reports saturation


class UiPriority:
    """The calling thread's nice value, lowered by ``lower`` and put back by ``restore``."""

    def __init__(self, increment: int = UI_NICE) -> None:
        self.increment = increment
        self._tid: int | None = None
        self._before: int | None = None
        self.now: int | None = None  # the thread's nice value while lowered (None: not lowered)

    def lower(self) -> int | None:
        """Add the increment to this thread's nice value; the new value, or None where it cannot.
        The launching thread starts first, at the value from before."""
        if self._tid is not None or not hasattr(os, "setpriority"):
            return self.now
        launcher.ensure_started()
        tid = threading.get_native_id()
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, before + self.increment))
            self.now = os.getpriority(os.PRIO_PROCESS, tid)
        except OSError:
            return None
        self._tid, self._before = tid, before
        return self.now

    def restore(self) -> bool:
        """Put the thread's nice value back; False where the system does not let an unprivileged
        process raise it (it then stays lowered until the process exits, its children unaffected)."""
        if self._tid is None or self._before is None:
            return True
        try:
            os.setpriority(os.PRIO_PROCESS, self._tid, self._before)
        except OSError:
            return False
        self._tid, self._before, self.now = None, None, None
        return True


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
