"""`speclab sweep --app`: the sweep driver under a screen — the heat map fills in as cells finish.

The driver runs in a Textual worker on the app's loop; its observer calls only post messages, so
the screen repaints from the driver's own reductions. ``q`` stops the cell under way and ends the
sweep as Ctrl-C does headless (finished cells kept, partial reductions written, exit 130).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Footer, ProgressBar, RichLog, Static

from speclab.model.exit_codes import ExitCode
from speclab.session.sweep import CellReporter, SweepDriver, SweepOutcome, SweepProgress, SweepSetup
from speclab.sweep import CellPlan, CellResult, SweepResult
from speclab.sweep.lines import cell_line, progress_line

from .widgets.sweep_heat import HeatModel, SweepHeat


class SweepEvent(Message):
    """Something the driver said: a note, a cell started, a cell finished."""

    def __init__(self, line: str, progress: SweepProgress | None = None, running: CellPlan | None = None,
                 result: SweepResult | None = None) -> None:
        super().__init__()
        self.line = line
        self.progress = progress
        self.running = running
        self.result = result


class SweepEnded(Message):
    def __init__(self, outcome: SweepOutcome | None, error: str = "") -> None:
        super().__init__()
        self.outcome = outcome
        self.error = error


class AppObserver:
    """The driver's observer inside the app: every call becomes a message."""

    def __init__(self, app: SweepApp) -> None:
        self.app = app

    def note(self, text: str) -> None:
        self.app.post_message(SweepEvent(text))

    def cell_started(self, plan: CellPlan, progress: SweepProgress) -> None:
        self.app.post_message(SweepEvent("", progress, plan))

    def cell_finished(self, cell: CellResult, progress: SweepProgress, result: SweepResult, elapsed_s: float) -> None:
        self.app.post_message(SweepEvent(cell_line(cell, progress.done, progress.total, result, elapsed_s), progress, None,
                                          result))


class SweepApp(App[int]):
    TITLE = "speclab sweep"
    CSS = """
    #sweep-status { height: 2; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    #sweep-bar { padding: 0 1; height: 1; }
    #sweep-log { height: 1fr; border-top: solid $primary; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "next_class", "class"),
        Binding("m", "next_measure", "tpot/throughput"),
        Binding("q", "stop", "stop and keep finished cells"),
    ]

    def __init__(self, setup: SweepSetup, reporter: CellReporter) -> None:
        """Validates the whole grid here (InputError before the screen opens)."""
        super().__init__()
        self.driver = SweepDriver(setup, AppObserver(self), reporter)
        self.model = HeatModel(self.driver.grid)
        self.interrupted = asyncio.Event()
        self.outcome: SweepOutcome | None = None
        self.progress_line = ""

    def compose(self) -> ComposeResult:
        yield Static(self._status(), id="sweep-status")
        yield ProgressBar(total=None, show_eta=False, id="sweep-bar")
        yield SweepHeat(self.model, id="sweep-heat")
        yield RichLog(id="sweep-log", wrap=True, max_lines=500)
        yield Footer()

    def _status(self) -> Text:
        grid, setup = self.driver.grid, self.driver.setup
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(" speclab sweep ", style="bold reverse")
        if self.driver.engine.simulated:
            out.append(" SIMULATED ", style="bold black on yellow")
        out.append(f" lab {setup.lab.name} · scenario {self.driver.scenario_name} · {len(grid.configs)} configs × "
                    f"{len(grid.load)} levels × {grid.repeats} · {setup.cell_s:g} s cells")
        out.append("\n " + (self.progress_line or "starting…"), style="dim" if not self.progress_line else "")
        return out

    def on_mount(self) -> None:
        self.run_driver()

    @work(group="sweep", exclusive=True, exit_on_error=False)
    async def run_driver(self) -> None:
        try:
            outcome = await self.driver.run(self.interrupted)
        except Exception as error:  # shown, and the app exits with the error's code
            self.post_message(SweepEnded(None, f"{type(error).__name__}: {error}"))
            return
        self.post_message(SweepEnded(outcome))

    def on_sweep_event(self, message: SweepEvent) -> None:
        if message.line:
            self.query_one(RichLog).write(message.line)
        if message.progress is not None:
            p = message.progress
            self.progress_line = progress_line(p.done, p.failed, p.total, p.eta_s, message.running)
            bar = self.query_one(ProgressBar)
            bar.update(total=message.progress.total, progress=message.progress.done)
        self.model.running = message.running
        if message.result is not None:
            self.model.take(message.result)
        self.query_one("#sweep-status", Static).update(self._status())
        self.query_one(SweepHeat).refresh(layout=True)

    def on_sweep_ended(self, message: SweepEnded) -> None:
        self.outcome = message.outcome
        self.model.running = None
        log = self.query_one(RichLog)
        if message.outcome is None:
            log.write(f"sweep failed: {message.error}")
            self.progress_line = f"failed: {message.error} · q to leave"
        else:
            self.model.take(message.outcome.result)
            code = message.outcome.code
            self.progress_line = f"exit {int(code)} ({code.name.lower()}): {message.outcome.reason} · q to leave"
            log.write(self.progress_line)
        self.query_one("#sweep-status", Static).update(self._status())
        self.query_one(SweepHeat).refresh(layout=True)

    def action_next_class(self) -> None:
        self.model.next_class()
        self.query_one(SweepHeat).refresh(layout=True)

    def action_next_measure(self) -> None:
        self.model.next_measure()
        self.query_one(SweepHeat).refresh(layout=True)

    async def action_stop(self) -> None:
        """First q: stop the cell under way and write what finished; once the sweep ended, leave."""
        if self.outcome is not None or self.progress_line.startswith("failed"):
            code = self.outcome.code if self.outcome is not None else ExitCode.INTERNAL_ERROR
            self.exit(return_code=int(code))
            return
        if not self.interrupted.is_set():
            self.interrupted.set()
            self.query_one(RichLog).write("stopping: the cell under way is dropped, finished cells are kept…")
