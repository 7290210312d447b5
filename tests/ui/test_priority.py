"""The app yields the CPU to the traffic workers: a lower nice value for its thread only, children
started at the process's own priority, the value put back when traffic ends, fewer repaints under load."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from speclab.servers.launcher import launch, launcher_nice
from speclab.ui.priority import LOADED_RATE_S, UI_NICE, RenderCap, UiPriority

CHILD_NICE = [sys.executable, "-c", "import os; print(os.nice(0))"]


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a thread of its own, so the test's thread keeps its priority whatever happens."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(fn()))
    thread.start()
    thread.join(60)
    assert got, "the thread did not finish"
    return got[0]


def test_lowering_changes_only_the_calling_thread() -> None:
    before = _nice()
    assert _in_thread(lambda: UiPriority(5).lower()) == min(19, before + 5)
    assert _nice() == before  # this thread untouched


def test_children_started_after_the_lowering_keep_the_priority_from_before_it() -> None:
    def lowered_then_spawn() -> tuple[int | None, int, int, int | None]:
        priority = UiPriority()
        lowered = priority.lower()
        direct = int(subprocess.run(CHILD_NICE, capture_output=True, text=True, check=True).stdout)

        async def via_launcher() -> int:
            proc = await launch(subprocess.Popen, CHILD_NICE, stdout=subprocess.PIPE, text=True)
            out, _ = await asyncio.get_running_loop().run_in_executor(None, proc.communicate)
            return int(out)

        return lowered, direct, asyncio.run(via_launcher()), launcher_nice()

    before = _nice()
    lowered, direct, launched, at_launcher = _in_thread(lowered_then_spawn)
    assert lowered == min(19, before + UI_NICE)
    assert direct == lowered  # what a child forked from the lowered thread would get
    assert at_launcher is not None and launched == at_launcher <= before


def test_restore_puts_the_value_back_where_the_system_allows_it() -> None:
    def lower_and_restore() -> tuple[int | None, bool, int]:
        priority = UiPriority()
        lowered = priority.lower()
        restored = priority.restore()
        return lowered, restored, _nice()

    before = _nice()
    lowered, restored, after = _in_thread(lower_and_restore)
    assert lowered == min(19, before + UI_NICE)
    if restored:  # privileged, or RLIMIT_NICE allows it
        assert after == before
    else:  # an unprivileged process may not raise a thread's priority back
        assert after == lowered
    assert UiPriority().restore() is True  # nothing lowered, nothing to put back


def test_render_cap_paints_every_snapshot_unless_loaded() -> None:
    now = [0.0]
    cap = RenderCap(clock=lambda: now[0])
    assert all(cap.due(loaded=False) for _ in range(3))
    cap = RenderCap(clock=lambda: now[0])
    painted = 0
    for step in range(40):  # ten seconds of 4 Hz snapshots while saturated
        now[0] = step * 0.25
        painted += cap.due(loaded=True)
    assert painted == round(10 / LOADED_RATE_S)


def test_the_app_lowers_its_loop_while_traffic_runs_and_puts_it_back_on_quit() -> None:
    from speclab.ui import create_app
    from tests.ui.fakes import FakeSource

    async def drive() -> tuple[int, int | None, int, bool, int | None]:
        before = _nice()
        source = FakeSource(loop_forever=True, delay=0.01)
        app = create_app(source, source, yield_cpu=True)
        async with app.run_test(size=(120, 40)) as pilot:
            while app.priority.now is None:
                await pilot.pause(0.01)
            during = _nice()
            await pilot.press("q")
        return before, app.priority.now, during, ("stop", ()) in source.calls, _nice()

    before, left, during, stopped, after = _in_thread(lambda: asyncio.run(drive()))
    assert during == min(19, before + UI_NICE) and stopped
    if left is None:  # put back (privileged, or RLIMIT_NICE allows it)
        assert after == before
    else:
        assert after == during
