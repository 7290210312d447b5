"""The app under a simulator time scale: the header says it, and the rate control is modelled time."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

from textual.widgets import Input, Static

from speclab.session.live import LiveSession
from speclab.session.options import RunOptions
from speclab.ui import create_app
from speclab.ui.screens.dialogs import NumberDialog
from speclab.ui.widgets.status import StatusBar, render_status
from tests.ui.fakes import FakeSource
from tests.ui.test_ui_controls import SIZE, controls_done, lab, settle


async def test_the_header_shows_the_scale_and_the_rate_dialog_says_modelled_time() -> None:
    source = FakeSource()
    source.info = dataclasses.replace(source.info, time_scale=3.0)
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        header = render_status(lab(app).status, 120).plain
        assert "TIME SCALE 3" in header and "modelled time" in header
        assert "TIME SCALE 3" in str(app.screen.query_one(StatusBar).render())
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog)
        texts = " ".join(str(w.render()) for w in app.screen.query(Static))
        assert "modelled time" in texts
        app.screen.query_one("#value", Input).value = ""
        await pilot.press("6", "enter")
        await controls_done(pilot, app)
        assert source.calls == [("set_rate", (6.0,))]  # the app passes the modelled rate as typed


async def test_an_unscaled_run_says_nothing_of_a_scale() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        assert "TIME SCALE" not in render_status(lab(app).status, 120).plain


class _Runner:
    def __init__(self) -> None:
        self.rates: list[float] = []

    async def set_rate(self, rate: float) -> None:
        self.rates.append(rate)


async def test_the_session_sends_a_modelled_rate_to_the_workers_in_wall_time() -> None:
    session = LiveSession(RunOptions(scenario="smoke", engine="sim", time_scale=2.0))
    runner: Any = _Runner()
    session.runner = runner
    await session.set_rate(6.0)
    assert runner.rates == [3.0]  # 6 modelled req/s are 3 per wall second at S = 2
    assert session.events[-1].message == "rate -> 6 req/s" and session.info.time_scale == 2.0
    shutil.rmtree(session._log_dir, ignore_errors=True)
