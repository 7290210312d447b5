"""How long one snapshot costs the UI thread, per tab: ``.venv/bin/python -m tests.ui.render_cost``.

Feeds the frozen stream again and again through ``LabState.ingest`` + ``LabScreen.refresh_view``
and renders the custom widgets of the showing tab, as the compositor would once per refresh; the
A/B tab is measured again on the relaunched variant, for all classes and for one. ``ingest`` alone is measured on a stream
whose every snapshot closes a new interval (the worst case: real intervals close at 1 Hz).
Informational (wall-clock), so it is a script, not a test.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from speclab.ui import create_app
from speclab.ui.screens.lab import TABS
from speclab.ui.state import LabState
from speclab.ui.widgets.acceptance import AcceptanceDetail
from speclab.ui.widgets.breakdown import Breakdown
from speclab.ui.widgets.servers import ServerCard
from speclab.ui.widgets.spectrum import SpectrumChart
from speclab.ui.widgets.status import StatusBar
from speclab.ui.widgets.timeseries import TimeSeries
from tests.ui.fakes import FakeSource

PAINTED = (SpectrumChart, Breakdown, TimeSeries, ServerCard, AcceptanceDetail, StatusBar)


async def measure(rounds: int = 200) -> dict[str, float]:
    source = FakeSource()
    app = create_app(source, source)
    out: dict[str, float] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        while app.state.snapshots_seen < len(source.frozen):
            await pilot.pause(0.01)
        lab = app.lab
        first = lab.view.variant
        cases = (*((t, first, "all") for t in TABS), ("ab", "k4", "all"), ("ab", "k4", "tool_call"))
        for tab, variant, prompt_class in cases:
            lab.action_show_tab(tab)
            lab.select(variant, prompt_class)
            await pilot.pause()
            painted = [w for w in lab.query("*") if isinstance(w, PAINTED) and w.is_on_screen]
            start = time.perf_counter()
            for i in range(rounds):
                app.state.ingest(source.frozen[i % len(source.frozen)])
                lab.refresh_view()
                for widget in painted:
                    widget.render()
            name = tab if variant == first else f"{tab} {variant}/{prompt_class}"
            out[name] = (time.perf_counter() - start) / rounds * 1000
        await app.action_quit()
    out["ingest"] = ingest_cost(source, rounds)
    return out


def ingest_cost(source: FakeSource, rounds: int) -> float:
    """``LabState.ingest`` when each snapshot closes a new interval (and so adds to the A/B windows)."""
    state = LabState(source.info)
    state.set_servers(source.servers())
    fresh = [replace(source.frozen[i % len(source.frozen)], interval=i, events=()) for i in range(rounds)]
    start = time.perf_counter()
    for snap in fresh:
        state.ingest(snap)
    return (time.perf_counter() - start) / rounds * 1000


def main() -> None:
    for tab, ms in asyncio.run(measure()).items():
        print(f"{tab:<18} {ms:6.2f} ms per snapshot")


if __name__ == "__main__":
    main()
