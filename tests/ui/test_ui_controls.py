"""Pilot tests: every control, asserting on app state, recorded control calls and messages.

The relaunch dialog's are in test_ui_relaunch.py.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from typing import Any

from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import Input, Static

from speclab.model.errors import InputError
from speclab.model.snapshot import Snapshot
from speclab.ui import SpeclabApp, create_app
from speclab.ui.messages import ControlApplied
from speclab.ui.screens.dialogs import NumberDialog
from speclab.ui.screens.help import HelpScreen
from speclab.ui.screens.lab import NO_CONTROLS, RUN_ENDED, LabScreen
from speclab.ui.widgets.ab import ABTable
from speclab.ui.widgets.acceptance import AcceptanceDetail
from speclab.ui.widgets.replay_bar import ReplayBar
from speclab.ui.widgets.spectrum import SpectrumChart
from speclab.ui.widgets.status import render_status
from tests.ui.fakes import FakeSource, settle

SIZE = (120, 40)


async def controls_done(pilot: Pilot[Any], app: SpeclabApp) -> None:
    """Wait for the dialog-driven control workers (the snapshot worker runs until the app stops)."""
    pending = [w for w in app.workers if w.group == "controls"]
    if pending:  # an empty list would mean "every worker" to Textual
        await app.workers.wait_for_complete(pending)
    await pilot.pause()


def lab(app: SpeclabApp) -> LabScreen:
    assert isinstance(app.screen_stack[0], LabScreen)
    return app.screen_stack[0]


async def test_space_pauses_and_resumes_traffic() -> None:
    source = FakeSource()
    app = create_app(source, source)
    messages: list[Message] = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await settle(pilot, app, source)
        await pilot.press("space")
        await pilot.pause()
        assert source.names() == ["pause"]
        assert lab(app).traffic_paused
        await pilot.press("space")
        await pilot.pause()
        assert source.names() == ["pause", "resume"]
        assert not lab(app).traffic_paused
    unique = list({id(m): m for m in messages}.values())  # the hook sees a bubbling message at each node
    applied = [(m.action, m.ok) for m in unique if isinstance(m, ControlApplied)]
    assert applied == [("pause", True), ("resume", True)]


async def test_rate_dialog_sets_rate_and_rejects_bad_input() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog)
        app.screen.query_one("#value", Input).value = ""
        await pilot.press("0", "enter")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog), "a rate of 0 must not be applied"
        assert "greater than 0 and at most 10000" in str(app.screen.query_one("#error", Static).render())
        app.screen.query_one("#value", Input).value = "10001"  # --rate's range: refused in the dialog
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog) and source.calls == []
        app.screen.query_one("#value", Input).value = ""
        await pilot.press("1", "2", ".", "5", "enter")
        await controls_done(pilot, app)
        await pilot.pause()
        assert isinstance(app.screen, LabScreen)
        assert source.calls == [("set_rate", (12.5,))]
        assert "rate 12.5" in render_status(lab(app).status).plain  # the status line says the rate offered now
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog)
        assert app.screen.query_one("#value", Input).value == "12.5"  # ... and the dialog starts from it
        await pilot.press("escape")
        await controls_done(pilot, app)


async def test_rate_dialog_escape_changes_nothing() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("escape")
        await controls_done(pilot, app)
        assert isinstance(app.screen, LabScreen)
        assert source.calls == []


async def test_concurrency_dialog_sets_concurrency() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, NumberDialog)
        await pilot.press("1", "6", "enter")
        await controls_done(pilot, app)
        assert source.calls == [("set_concurrency", (16,))]


async def test_corrected_toggle_switches_the_plotted_metric() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        last = source.frozen[-1]
        chart = app.screen.query_one("#spec-e2e", SpectrumChart)
        k2 = next(c for c in chart.curves if c.name == "k2")
        assert k2.values == last.cumulative["k2"].total.latency["e2e_corrected"].values
        assert "corrected" in str(chart.border_subtitle)
        await pilot.press("c")
        await pilot.pause()
        assert not lab(app).view.corrected
        k2 = next(c for c in chart.curves if c.name == "k2")
        assert k2.values == last.cumulative["k2"].total.latency["e2e"].values
        assert str(chart.border_subtitle).startswith("uncorrected")
        queue = app.screen.query_one("#spec-server_queue", SpectrumChart)
        assert "exact per-request" in str(queue.border_subtitle)


async def test_variant_and_class_selection_drive_every_view() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("v", "p", "p")
        await pilot.pause()
        view = lab(app).view
        assert (view.variant, view.prompt_class) == ("k4", "tool_call")
        chart = app.screen.query_one("#spec-e2e", SpectrumChart)
        assert [c.name for c in chart.curves if c.emphasis] == ["k4·2 (k=3)"], "the current epoch, labelled"
        assert str(chart.border_title) == "e2e · tool_call"
        await pilot.press("o")
        await pilot.pause()
        assert view.layout == "split"
        await pilot.press("2")
        await pilot.pause()
        detail = app.screen.query_one(AcceptanceDetail)
        assert str(detail.border_title) == "acceptance distribution · k4·2 (k=3) · tool_call"
        assert "k4 · tool_call" in render_status(lab(app).status).plain


async def test_acceptance_row_click_selects_variant_and_class() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("2")
        await pilot.pause()
        table = app.screen.query_one("#acc-table")
        table.focus()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert (lab(app).view.variant, lab(app).view.prompt_class) == ("baseline", "tool_call")


async def test_ab_view_compares_previous_and_current_config_of_the_relaunched_variant() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("v", "5")
        await pilot.pause()
        title = str(app.screen.query_one("#ab-title", Static).render())
        assert "previous k4 (" in title and "current k4·2 (k=3)" in title
        table = app.screen.query_one(ABTable)
        view = source.frozen[-1].ab["k4"]
        assert view.previous is not None
        prev, cur = view.previous.own.total, view.current.own.total
        assert table.cell_text("requests", "prev") == str(prev.requests)
        assert table.cell_text("requests", "cur") == str(cur.requests)
        assert cur.acceptance.rejection_rate is not None
        assert table.cell_text("rej", "cur") == f"{cur.acceptance.rejection_rate * 100:.1f}%"
        assert table.cell_text("rej", "cur_base") == "—"


async def test_help_lists_bindings_and_closes() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = {row[0]: row[1] for row in app.screen.rows}
        assert keys["q"] == "Stop traffic and servers, then exit"
        assert keys["space"].startswith("Pause or resume traffic") and keys["e"].startswith("Change k")
        assert "[" not in keys, "replay keys are hidden without a replay"
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, LabScreen)


async def test_quit_stops_the_source_and_returns_zero() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert source.names() == ["stop"]
    assert source.stopped.is_set()


async def test_a_sigint_stops_the_source_and_returns_130() -> None:
    """`kill -INT` (or Ctrl-C reaching the process) stops traffic and servers like q, then exits 130."""
    source = FakeSource()
    app = create_app(source, source, stop_on_sigint=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        os.kill(os.getpid(), signal.SIGINT)
        await source.stopped.wait()
        await pilot.pause()
    assert app.return_code == 130 and app.interrupted
    assert source.names() == ["stop"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler went with the app


async def assert_traffic_keys_off(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource) -> None:
    """Space, r, n and e are disabled, and pressing them opens nothing and calls nothing."""
    for action in ("toggle_pause", "set_rate", "set_concurrency", "relaunch"):
        assert not lab(app).check_action(action, ())
    await pilot.press("space", "r", "n", "e")
    await pilot.pause()
    assert isinstance(app.screen, LabScreen)
    assert source.calls == []


async def test_without_controls_the_traffic_keys_are_disabled_and_say_why() -> None:
    source = FakeSource(replay=True)
    app = create_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        screen = lab(app)
        await assert_traffic_keys_off(pilot, app, source)
        assert f"controls off: {NO_CONTROLS}" in render_status(screen.status).plain
        why = {row[0]: row[2] for row in screen.help_rows()}
        assert why["r"] == NO_CONTROLS and why["c"] == ""
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)  # the reason once under the table, "off" on each row
        assert str(app.screen.query_one("#off-why", Static).render()) == f"off: {NO_CONTROLS}"
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("c")
        assert not screen.view.corrected, "view keys still work in a replay"


class EndingSource(FakeSource):
    """A live run whose traffic ends after the frozen snapshots (the source's stream returns)."""

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        for snap in self.frozen:
            yield snap


async def test_after_the_run_ends_the_traffic_keys_are_disabled_and_say_why() -> None:
    """Space, r, n and e after the final snapshot would act on nothing (and pause wrote to a closed
    recording): they are off, the help says why, and nothing reaches the session."""
    source = EndingSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        screen = lab(app)
        for _ in range(300):  # the frozen snapshots are all sent: the source ends
            if screen.status.ended:
                break
            await pilot.pause(0.01)
        assert screen.run_ended
        await assert_traffic_keys_off(pilot, app, source)
        assert {row[0]: row[2] for row in screen.help_rows()}["r"] == RUN_ENDED
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Change arrival rate" not in titles and "Show keys" in titles


class FakeReplay:
    def __init__(self) -> None:
        self.playing = True
        self.speed = 1.0
        self.position = 30.0
        self.duration = 60.0
        self.calls: list[tuple[str, float]] = []

    async def play(self) -> None:
        self.playing = True
        self.calls.append(("play", 0.0))

    async def pause(self) -> None:
        self.playing = False
        self.calls.append(("pause", 0.0))

    async def set_speed(self, speed: float) -> None:
        self.speed = speed
        self.calls.append(("speed", speed))

    async def seek(self, t: float) -> None:
        self.position = t
        self.calls.append(("seek", t))


async def test_replay_hook_gets_play_pause_speed_and_seek() -> None:
    source = FakeSource(replay=True)
    replay = FakeReplay()
    app = create_app(source, replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        bar = app.screen.query_one("#replay-bar", ReplayBar)
        footer = app.screen.query_one("Footer")
        assert bar.region.height == 1 and bar.region.bottom <= footer.region.y, "the footer must not cover the bar"
        await pilot.press("space", "right_square_bracket", "full_stop", "comma", "comma")
        await pilot.pause()
    assert replay.calls == [("pause", 0.0), ("speed", 2.0), ("seek", 40.0), ("seek", 30.0), ("seek", 20.0)]
    replay.calls.clear()
    async with create_app(source, replay=replay).run_test(size=SIZE) as pilot:  # the bar's range is --speed's
        await pilot.press(*["right_square_bracket"] * 5, *["left_square_bracket"] * 8)
        await pilot.pause()
    speeds = [speed for _, speed in replay.calls]
    assert max(speeds) == 16.0 and min(speeds) == 0.25
    assert source.calls == []


class FailingSource(FakeSource):
    async def snapshots(self) -> AsyncIterator[Snapshot]:
        yield self.frozen[0]
        raise InputError("recordings/x/requests.jsonl:3: expected a JSON object")


async def test_a_source_error_is_one_line_in_the_status_not_a_crash() -> None:
    source = FailingSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            if lab(app).status.error:
                break
            await pilot.pause(0.01)
        status = render_status(lab(app).status).plain
        assert "requests.jsonl:3: expected a JSON object" in status
        assert "finished" in status
        await pilot.press("q")
    assert app.return_code == 0


async def test_command_palette_offers_the_controls() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Change arrival rate" in titles and "Relaunch variant" in titles
        replay_app = create_app(FakeSource(replay=True))
        assert "Change arrival rate" not in [c.title for c in replay_app.get_system_commands(app.screen)]


async def test_acceptance_columns_widen_with_their_values() -> None:
    """A count that grows from 307 to 3070 is shown whole, not cut to its first value's width."""
    from dataclasses import replace

    from textual.app import App, ComposeResult

    from speclab.ui.widgets.acceptance import AcceptanceTable
    from tests.ui.fakes import VARIANTS, build_snapshots

    base = build_snapshots(1)[-1]

    def with_requests(n: int) -> Snapshot:
        epochs = {v: tuple(replace(e, stats=replace(e.stats, classes={
            cls: replace(c, requests=n) for cls, c in e.stats.classes.items()})) for e in es)
            for v, es in base.epochs.items()}
        return replace(base, epochs=epochs)

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield AcceptanceTable(id="acc")

    app = One()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(AcceptanceTable)
        classes = tuple(c for c in base.cumulative[VARIANTS[0]].classes if c != "all")
        table.show(with_requests(307), VARIANTS, classes)
        await pilot.pause()
        table.show(with_requests(3070), VARIANTS, classes)
        await pilot.pause()
        column = next(c for c in table.columns.values() if str(c.key.value) == "requests")
        assert column.content_width >= len("3070")
        assert "3070" in "".join(s.text for s in table.render_line(1))
