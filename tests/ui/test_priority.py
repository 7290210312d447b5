"""The app yields the CPU to the traffic workers: a lower nice value for its thread, fewer repaints under load."""

from __future__ import annotations

import os
import threading

from speclab.ui.priority import LOADED_RATE_S, RenderCap, lower_ui_priority


def test_lowering_changes_only_the_calling_thread() -> None:
    got: list[int | None] = []
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=lambda: got.append(lower_ui_priority(5)))
    thread.start()
    thread.join()
    assert got == [min(19, before + 5)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # this thread untouched


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
