"""`speclab sweep` without a screen: a progress line before each cell, one line per finished cell.

Ctrl-C (or SIGTERM) stops the cell under way; every finished cell stays in ``sweep.json`` with the
partial reductions, and ``--resume`` runs the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any, TextIO

from speclab.model.exit_codes import ExitCode
from speclab.model.snapshot import Snapshot
from speclab.session.live import LiveSession
from speclab.session.sweep import SweepDriver, SweepProgress, SweepSetup
from speclab.sweep import CellPlan, CellResult, SweepResult

from .report import build_report
from .run import judge, report_extra


def cell_report(session: LiveSession, final: Snapshot, interrupted: bool) -> dict[str, Any]:
    """A cell's report.json: exactly what `speclab run --report` writes for the same run."""
    code, reason = judge(session, final, interrupted)
    return build_report(session.info, final, servers=session.servers(), command="sweep",
                        extra=report_extra(session, code, reason))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    whole = round(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def progress_text(progress: SweepProgress, plan: CellPlan | None) -> str:
    current = f" · now {plan.id} ({plan.phase})" if plan is not None else ""
    return (f"[sweep] {progress.done}/{progress.total} cells done ({progress.failed} failed) · "
            f"ETA {_duration(progress.eta_s)}{current}")


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def cell_text(cell: CellResult, progress: SweepProgress, result: SweepResult, elapsed_s: float) -> str:
    """E.g. ``cell k2_c8_r1 ok in 12 s: 412 req, TPOT p50 9.1 ms, 1530 tok/s, AL 2.41, batch 7.6; vs k0 ...``."""
    head = f"cell {progress.done}/{progress.total} {cell.plan.id}"
    if not cell.ok:
        return f"{head} FAILED in {elapsed_s:.0f} s: {cell.error}"
    server = cell.server
    batch = None if server is None else server.running_mean
    text = (f"{head} ok in {elapsed_s:.0f} s: {cell.requests('all')} req, "
            f"TPOT p50 {_fmt(cell.value('all', 'tpot'), '.1f')} ms, "
            f"{_fmt(cell.value('all', 'throughput'), '.0f')} tok/s, "
            f"AL {_fmt(cell.value('all', 'acceptance_length'), '.2f')}, batch {_fmt(batch, '.1f')}")
    if cell.config.speculative and cell.plan.phase == "grid":
        arm = cell.config.arm(result.grid.varying())
        found = (result.speedup.get("all") or {}).get(arm) or {}
        parts = []
        for measure in ("tpot", "throughput"):
            row = next((r for r in found.get(measure) or () if r["load"] == cell.load.as_dict()["value"]), None)
            if row is not None:
                parts.append(f"{measure} ×{row['speedup']:.2f}")
        if parts:
            text += f"; vs k0: {', '.join(parts)}"
    return text


class SweepPrinter:
    """The headless SweepObserver: plain lines, flushed, for a terminal or a log file."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def note(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def cell_started(self, plan: CellPlan, progress: SweepProgress) -> None:
        print(progress_text(progress, plan), file=self.out, flush=True)

    def cell_finished(self, cell: CellResult, progress: SweepProgress, result: SweepResult, elapsed_s: float) -> None:
        print(cell_text(cell, progress, result, elapsed_s), file=self.out, flush=True)


def crossover_lines(result: SweepResult) -> list[str]:
    """The crossover per class and arm, as the summary at the end prints it."""
    lines = []
    for prompt_class, per_arm in result.crossover.items():
        for arm, found in per_arm.items():
            shown = ", ".join(f"{m} {'none in the grid' if v is None else f'at {v:g}'}" for m, v in found.items())
            lines.append(f"crossover {prompt_class} {arm}: {shown}")
    return lines


async def run_sweep(setup: SweepSetup, out: TextIO = sys.stdout) -> ExitCode:
    printer = SweepPrinter(out)
    driver = SweepDriver(setup, printer, cell_report)
    grid = setup.grid
    print(f"speclab sweep: lab {setup.lab.name}, scenario {driver.scenario_name}, {len(grid.configs)} configurations × "
          f"{len(grid.load)} load levels × {grid.repeats} repeat(s), {setup.cell_s:g} s per cell after "
          f"{grid.warmup_s:g} s warm-up; engine: {driver.engine}", file=out, flush=True)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
        loop.add_signal_handler(signal.SIGTERM, interrupted.set)
    try:
        outcome = await driver.run(interrupted)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    for line in crossover_lines(outcome.result):
        print(line, file=out)
    for note in outcome.result.notes:
        print(f"note: {note}", file=out)
    print(f"sweep: {', '.join(str(p) for p in outcome.written)}", file=out)
    print(f"exit {int(outcome.code)} ({outcome.code.name.lower()}): {outcome.reason}", file=out, flush=True)
    return outcome.code
