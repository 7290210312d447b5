"""`speclab sweep` without a screen: a progress line before each cell, one line per finished cell.

Ctrl-C (or SIGTERM) stops the cell under way; every finished cell stays in ``sweep.json`` with the
partial reductions, and ``--resume`` runs the rest.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from speclab.model.exit_codes import ExitCode
from speclab.model.records import Event
from speclab.model.snapshot import Snapshot
from speclab.session.live import LiveSession
from speclab.session.signals import catch_interrupts, release_interrupts
from speclab.session.sweep import SweepDriver, SweepProgress, SweepSetup
from speclab.sweep import CellPlan, CellResult, SweepResult
from speclab.sweep.lines import cell_line, crossover_lines, progress_line

from .run import judge, session_report


def cell_report(session: LiveSession, final: Snapshot, interrupted: bool, events: list[Event]) -> dict[str, Any]:
    """A cell's report.json: exactly what `speclab run --report` writes for the same run."""
    code, reason = judge(session, final, interrupted)
    return session_report(session, final, code, reason, command="sweep", events=events)


class SweepPrinter:
    """The headless SweepObserver: plain lines, flushed, for a terminal or a log file."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def note(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def cell_started(self, plan: CellPlan, progress: SweepProgress) -> None:
        print(progress_line(progress.done, progress.failed, progress.total, progress.eta_s, plan), file=self.out,
              flush=True)

    def cell_finished(self, cell: CellResult, progress: SweepProgress, result: SweepResult, elapsed_s: float) -> None:
        print(cell_line(cell, progress.done, progress.total, result, elapsed_s), file=self.out, flush=True)


async def run_sweep(setup: SweepSetup, out: TextIO = sys.stdout) -> ExitCode:
    printer = SweepPrinter(out)
    driver = SweepDriver(setup, printer, cell_report)
    grid = setup.grid
    print(f"speclab sweep: lab {setup.lab.name}, scenario {driver.scenario_name}, {len(grid.configs)} configurations × "
          f"{len(grid.load)} load levels × {grid.repeats} repeat(s), {setup.cell_s:g} s per cell after "
          f"{grid.warmup_s:g} s warm-up; engine: {driver.engine}, {driver.time_scale_text}", file=out, flush=True)
    interrupted = catch_interrupts()
    try:
        outcome = await driver.run(interrupted)
        for line in crossover_lines(outcome.result):
            print(line, file=out)
        for note in outcome.result.notes:
            print(f"note: {note}", file=out)
        print(f"sweep: {', '.join(str(p) for p in outcome.written)}", file=out)
        print(f"exit {int(outcome.code)} ({outcome.code.name.lower()}): {outcome.reason}", file=out, flush=True)
        await driver.hold_metrics(interrupted)
    finally:
        release_interrupts()
        driver.close_metrics()
    return outcome.code
