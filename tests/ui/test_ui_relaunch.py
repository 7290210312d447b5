"""Pilot tests of the relaunch dialog: what it sends, what it refuses and how it says why."""

from __future__ import annotations

from typing import Any

from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import Input, Select, Static

from speclab.ui import SpeclabApp, create_app
from speclab.ui.messages import ControlApplied
from speclab.ui.screens.dialogs import ConfirmDialog
from speclab.ui.screens.lab import LabScreen
from speclab.ui.screens.relaunch import RelaunchDialog
from tests.ui.fakes import FakeSource, settle
from tests.ui.test_ui_controls import SIZE, controls_done, lab


async def open_relaunch(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource) -> RelaunchDialog:
    await settle(pilot, app, source)
    assert lab(app).view.variant == "k2", "the first speculative variant is selected at start"
    await pilot.press("e")
    await pilot.pause()
    assert isinstance(app.screen, RelaunchDialog)
    return app.screen


async def test_relaunch_with_confirmation_sends_only_the_changes() -> None:
    source = FakeSource()
    app = create_app(source, source)
    messages: list[Message] = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        dialog = await open_relaunch(pilot, app, source)
        assert dialog.query_one("#num_speculative_tokens", Input).value == "2"
        await pilot.press("backspace", "3")
        await pilot.click("#enable_chunked_prefill")
        await pilot.pause()
        await pilot.click("#review")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one("#body", Static).render())
        assert "num_speculative_tokens: 2 → 3" in body and "enable_chunked_prefill: on → off" in body
        assert source.calls == []
        await pilot.press("y")
        await controls_done(pilot, app)
        assert source.calls == [
            ("relaunch", ("k2", {"num_speculative_tokens": 3, "enable_chunked_prefill": False}))
        ]
    assert any(isinstance(m, ControlApplied) and m.action == "relaunch" for m in messages)


async def test_relaunch_cancelled_at_confirmation_sends_nothing() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await open_relaunch(pilot, app, source)
        app.screen.query_one("#max_num_seqs", Input).value = "32"
        await pilot.click("#review")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        await controls_done(pilot, app)
        assert isinstance(app.screen, LabScreen)
        assert source.calls == []


async def test_relaunch_dialog_refuses_no_change_and_values_out_of_range() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_relaunch(pilot, app, source)
        await pilot.click("#review")
        await pilot.pause()
        assert app.screen is dialog
        assert "nothing changed" in str(dialog.query_one("#error", Static).render())
        k_field = dialog.query_one("#num_speculative_tokens", Input)
        k_field.value = "65"
        k_field.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "between 1 and 64" in str(dialog.query_one("#error", Static).render())
        k_field.value = "3"
        seqs = dialog.query_one("#max_num_seqs", Input)
        seqs.value = "99999999"  # above the lab's limit: refused here, not by a failed relaunch
        seqs.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "max_num_seqs: must be between 1 and 65536" in str(dialog.query_one("#error", Static).render())
        await pilot.press("escape")
        await controls_done(pilot, app)
        assert source.calls == []


async def test_baseline_relaunch_cannot_set_k() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, source)
        await pilot.press("v", "v", "e")
        await pilot.pause()
        assert lab(app).view.variant == "baseline"
        assert isinstance(app.screen, RelaunchDialog)
        assert app.screen.query_one("#num_speculative_tokens", Input).disabled
        await pilot.press("escape")


async def test_relaunch_changes_the_k_schedule_and_rejection_method() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_relaunch(pilot, app, source)
        schedule = dialog.query_one("#num_speculative_tokens_per_batch_size", Input)
        schedule.value = "1-8:2, 9-64:1"
        dialog.query_one("#rejection_sample_method", Select).value = "block"
        await pilot.pause()
        await pilot.click("#review")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one("#body", Static).render())
        assert "num_speculative_tokens_per_batch_size: default → 1-8:2, 9-64:1" in body
        assert "rejection_sample_method: standard → block" in body
        await pilot.press("y")
        await controls_done(pilot, app)
        assert source.calls == [("relaunch", ("k2", {"num_speculative_tokens_per_batch_size": [[1, 8, 2], [9, 64, 1]],
                                                     "rejection_sample_method": "block"}))]


async def test_relaunch_dialog_explains_a_bad_schedule_or_a_missing_synthetic_length() -> None:
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_relaunch(pilot, app, source)
        error = dialog.query_one("#error", Static)
        schedule = dialog.query_one("#num_speculative_tokens_per_batch_size", Input)
        for text, expected in (("2-8:2", "The first batch-size range must start at 1"),
                               ("1-8:5", "1-8:5 is over k (2)"), ("1..8=2", "write ranges as START-END:K")):
            schedule.value = text
            schedule.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog and expected in str(error.render()), text
        schedule.value = ""
        dialog.query_one("#rejection_sample_method", Select).value = "synthetic"
        schedule.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert "'synthetic' needs a target acceptance length" in str(error.render())
        await pilot.press("escape")
        await controls_done(pilot, app)
        assert source.calls == []


async def test_relaunch_buttons_stay_in_view_at_80x24() -> None:
    """A short terminal packs the form's rows: Review and Cancel are on screen without scrolling."""
    source = FakeSource()
    app = create_app(source, source)
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_relaunch(pilot, app, source)
        await pilot.pause()
        box = dialog.query_one(".dialog")
        for button in ("#review", "#cancel"):
            region = dialog.query_one(button).region  # where it would be drawn; the box clips what is past it
            assert box.scroll_offset.y == 0 and region.bottom <= box.content_region.bottom, \
                f"{button} is below the fold: {region} in {box.content_region}"
        await pilot.press("escape")
        await controls_done(pilot, app)
