"""The lab app over a real live session: simulator processes, traffic workers, real controls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Input

from speclab.cli.commands import run_options
from speclab.model.errors import InputError
from speclab.session.live import LiveSession
from speclab.ui.app import create_app
from speclab.ui.screens.relaunch import RelaunchDialog
from speclab.ui.widgets.workers import WorkersPanel

SCENARIO = """
name = "steady"
seed = 5
duration_s = 120
endpoint = "chat"
[arrival]
process = "constant"
rate = 3
[classes.factual_qa]
temperature = 0
max_tokens = 16
prompts = ["What is the capital of France?", "Which planet is closest to the sun?"]
"""


async def _until(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.1)


async def test_pause_relaunch_and_quit_drive_the_real_session(tmp_path: Path) -> None:
    scenario = tmp_path / "steady.toml"
    scenario.write_text(SCENARIO)
    session = LiveSession(run_options(str(scenario), {"lab_name_opt": "default", "variants": "baseline,k2"}))
    app = create_app(session, session)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(lambda: app.state.latest is not None and app.state.latest.cumulative["k2"].total.requests > 0)

        # The workers panel reads the session's own per-worker rows (measurement.workers' source).
        await pilot.press("6")
        panel = app.screen.query_one(WorkersPanel)
        await _until(lambda: session.runner is not None and len(panel.rows) == session.runner.workers)
        assert {r.node for r in panel.rows} == {"local"} and all(r.last_interval is not None for r in panel.rows)

        await pilot.press("space")
        await _until(lambda: session.runner is not None and session.runner.paused)
        await pilot.press("space")
        await _until(lambda: session.runner is not None and not session.runner.paused)

        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, RelaunchDialog)
        k_field = app.screen.query_one("#num_speculative_tokens", Input)
        assert k_field.value == "2"
        k_field.value = "3"
        await pilot.click("#review")
        await pilot.pause()
        await pilot.press("y")
        await _until(lambda: any(e.kind == "relaunch" for e in session.events), 60)
        relaunch = next(e for e in session.events if e.kind == "relaunch")
        assert relaunch.variant == "k2" and relaunch.data["changes"]["num_speculative_tokens"] == {"from": 2, "to": 3}
        assert session.servers_running["k2"].settings["num_speculative_tokens"] == 3
        assert session.servers_running["k2"].status == "ready"
        kinds = [e.kind for e in session.events]
        assert "pause" in kinds and "resume" in kinds

        # Settings the lab refuses end before the transition: k2 keeps its server and its epoch.
        with pytest.raises(InputError, match="max_num_seqs"):
            await session.relaunch("k2", {"max_num_seqs": 99_999_999})
        assert [e.kind for e in session.events].count("transition") == 1
        assert not session.aggregator.book.in_transition("k2")
        assert session.servers_running["k2"].status == "ready"

        await pilot.press("q")
        await _until(lambda: session.final is not None, 60)
    assert app.return_code == 0
    assert session.final is not None and session.final.finished
    with pytest.raises(InputError, match="the run has ended"):
        await session.pause()  # once the recording is closed a control has nothing to act on
    assert all(s.status in ("stopped", "exited") for s in session.servers_running.values())
