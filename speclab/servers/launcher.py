"""Child processes start from one thread that keeps the priority this process began with.

Linux keeps a nice value per thread and a child process inherits the one of the thread that forked
it. The lab app lowers its event loop's thread once traffic runs (``speclab.ui.priority``); a
server relaunched from that loop, or a traffic worker, would otherwise start at the app's lowered
priority and keep it for life (an unprivileged process cannot raise it back), starved beside
anything else on the host. So servers and workers are started here: one thread, begun before any
thread of the process is lowered (``ensure_started``), that only forks.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_nice: int | None = None


def _own_nice() -> int | None:
    if not hasattr(os, "getpriority"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def ensure_started() -> ThreadPoolExecutor:
    """The launching thread, started now if it is not yet: call it before lowering any thread."""
    global _executor, _nice
    with _lock:
        if _executor is None:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speclab-launch")
            _nice = executor.submit(_own_nice).result()  # its one thread exists from here on
            _executor = executor
        return _executor


def launcher_nice() -> int | None:
    """The launching thread's nice value (None before it started, or where there is none)."""
    return _nice


async def launch(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` (a Popen, a Process.start) on the launching thread and return what it returned."""
    executor = ensure_started()
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args, **kwargs))
