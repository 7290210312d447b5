"""`speclab sweep`'s driver: every cell of the grid as its own measured run, the reductions after each.

A cell is one configuration at one load level: a run of the scenario's traffic (the same prompts
and seeds at every configuration, because each cell starts the plan from its first request) against
one server launched with that configuration, recorded under ``cells/<id>``. Launching per cell,
rather than relaunching one server under running traffic, keeps the closed loop from spinning on
connect errors while a server restarts, and keeps each recording whole on its own. After every
cell, and on an interrupt, ``sweep.json`` and ``sweep.md`` are rewritten from the cells finished
so far; a cell whose server fails is kept as failed and the sweep goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from speclab import __version__
from speclab.metrics.exporter_http import DEFAULT_HOST, MetricsEndpoint, serve_metrics
from speclab.model.errors import InputError, SpeclabError, writing
from speclab.model.exit_codes import ExitCode
from speclab.model.files import write_text_atomic
from speclab.model.lab import Lab
from speclab.model.records import Event
from speclab.model.snapshot import Snapshot
from speclab.recording.preflight import require_writable_dir
from speclab.servers.backends import AUTO, EngineRequest
from speclab.servers.engine import select_engine
from speclab.servers.pairing import pair_info, require_pairing
from speclab.sweep import (
    CellPlan,
    CellResult,
    Grid,
    SweepResult,
    cell_from_report,
    confirmation_configs,
    failed_cell,
    load_sweep,
    reduce_sweep,
    remaining,
)
from speclab.sweep.output import write_sweep
from speclab.traffic.schedule import Plan, build_plan

from .follow import follow
from .live import LiveSession
from .options import RunOptions, load_scenario
from .sweep_lab import cell_lab, lab_carries_schedules
from .sweep_scale import level_scales, scale_summary, scale_text
from .time_scale import refuse_for_real_engine

CELLS = "cells"
CAP_FACTOR = 3.0  # a cell short of its minimum requests runs on, up to this many times its length
PAIR_KEYS = ("target_model", "target_revision", "draft_method", "draft_model", "draft_revision", "paired", "forced")
FAILED_EXITS = (int(ExitCode.SERVER_NOT_READY), int(ExitCode.ALL_REQUESTS_FAILED))

# Builds a cell's report.json from its finished session (a seam: the front end adds its own sections).
CellReporter = Callable[[LiveSession, Snapshot, bool, list[Event]], dict[str, Any]]  # events: every one of the cell


@dataclass(frozen=True)
class SweepSetup:
    lab: Lab
    scenario: str
    grid: Grid
    directory: Path
    cell_s: float  # measured seconds per cell, after the warm-up
    engine: EngineRequest = AUTO
    seed: int | None = None
    workers: int | None = 1
    cluster: str | None = None  # --cluster: every cell's traffic workers on this Ray cluster
    force: bool = False
    resume: bool = False
    confirm: bool = True
    confirm_fixed_from_grid: bool = False  # --quick: the pass runs the schedule alone, k = 0 and fixed k from the grid
    drain_timeout_s: float = 5.0
    time_scale: float | None = None  # --time-scale S; None: auto, per load level for its heaviest cell
    metrics_port: int | None = None  # --metrics-port: one endpoint for the whole sweep, every cell in it
    metrics_host: str = DEFAULT_HOST
    metrics_hold_s: float = 0.0  # the front end keeps the final figures up this long


@dataclass
class SweepProgress:
    """Where the sweep stands: what the progress line and the app's view show."""

    total: int
    done: int = 0
    failed: int = 0
    phase: str = "grid"
    current: CellPlan | None = None
    started: float = field(default_factory=time.monotonic)
    cell_seconds: list[float] = field(default_factory=list)

    @property
    def eta_s(self) -> float | None:
        """Remaining cells at the mean time of the cells this run has finished."""
        if not self.cell_seconds:
            return None
        return max(0, self.total - self.done) * sum(self.cell_seconds) / len(self.cell_seconds)


class SweepObserver(Protocol):
    def note(self, text: str) -> None: ...
    def cell_started(self, plan: CellPlan, progress: SweepProgress) -> None: ...
    def cell_finished(self, cell: CellResult, progress: SweepProgress, result: SweepResult, elapsed_s: float) -> None: ...


@dataclass(frozen=True)
class SweepOutcome:
    code: ExitCode
    reason: str
    result: SweepResult
    written: list[Path]


def check_resume(directory: Path, grid: Grid, lab: Lab, scenario: str) -> list[CellResult]:
    """The finished cells of the sweep in ``directory``; InputError when it is another sweep."""
    doc, stored, cells = load_sweep(directory)
    if doc.get("lab") != lab.name or doc.get("scenario") != scenario:
        raise InputError(f"--resume: {directory}/sweep.json is lab {doc.get('lab')!r}, scenario "
                         f"{doc.get('scenario')!r}; this is lab {lab.name!r}, scenario {scenario!r}")
    mine, theirs = grid.as_dict(), stored.as_dict()
    for key in mine:
        if mine[key] != theirs.get(key):
            raise InputError(f"--resume: the grid's {key} differs from the one in {directory}/sweep.json "
                             f"({theirs.get(key)!r} there, {mine[key]!r} here); give the same grid or a new --report")
    return cells


def prepare_directory(directory: Path, *, resume: bool, force: bool) -> None:
    """A fresh sweep refuses to write over another one unless ``force``; then clears its files. A
    directory that cannot be written is refused first, before any cell runs."""
    require_writable_dir(directory, "--report")
    if resume:
        return
    if (directory / "sweep.json").exists() and not force:
        raise InputError(f"--report {directory}: a sweep is already there; --resume continues it, --force starts over")
    if force and directory.is_dir():
        for path in directory.iterdir():
            if path.name == CELLS and path.is_dir():
                shutil.rmtree(path)
            elif path.is_file() and path.name.startswith(("sweep.", "speedup_vs_load.", "acceptance_length.", "pareto.")):
                path.unlink()


class SweepDriver:
    """``await SweepDriver(setup, observer, reporter).run(interrupted)``."""

    def __init__(self, setup: SweepSetup, observer: SweepObserver, reporter: CellReporter) -> None:
        self.setup = setup
        self.observer = observer
        self.reporter = reporter
        self.grid = setup.grid
        self.lab = setup.lab
        self.scenario, _ = load_scenario(setup.scenario)
        self.scenario_name = self.scenario.name or "scenario"
        refuse_for_real_engine(setup.time_scale, setup.engine)
        self.engine = select_engine(setup.engine)
        self.versions: dict[str, Any] = {"speclab": __version__}
        self.cells: list[CellResult] = []
        self.classes: list[str] = []
        self.check()
        # Bound once every input has been checked and before any server starts (a port in use: exit 2).
        self.metrics: MetricsEndpoint | None = None
        self._cells_run = 0
        self._confirm_from_grid = False
        if setup.metrics_port is not None:
            run = {"lab": self.lab.name, **{k: str(v) for k, v in pair_info(self.lab).items()}}
            self.metrics = serve_metrics(setup.metrics_port, setup.metrics_host, run)

    def check(self) -> None:
        """Every configuration's lab and pairing, before any server starts (exit 2 naming the field)."""
        for config in self.grid.configs:
            lab, _ = cell_lab(self.lab, config)
            require_pairing(lab, force=self.setup.force)
        if self.setup.cell_s <= 0:
            raise InputError(f"--cell-duration: {self.setup.cell_s:g} s is not a cell length; give seconds above 0")
        first = self._traffic_plan(self.grid.cells()[0])  # the scenario takes the ladder's mode
        self.classes = [c.name for c in first.classes if c.weight > 0]
        self.scales = level_scales(self.grid.cells(), asked=self.setup.time_scale, engine=self.engine.engine,
                                   lab=self.lab, traffic=self._traffic_plan)

    @property
    def time_scale_text(self) -> str:
        return scale_text(self.scales)

    def meta(self, complete: bool) -> dict[str, Any]:
        return {"lab": self.lab.name, "scenario": self.scenario_name, "engine": str(self.engine),
                "simulated": self.engine.simulated, **scale_summary(self.scales), "complete": complete,
                "pair": {k: str(v) for k, v in pair_info(self.lab).items() if k in PAIR_KEYS},
                "versions": dict(self.versions)}

    def write(self, *, complete: bool, plots: bool) -> tuple[SweepResult, list[Path]]:
        result = reduce_sweep(self.grid, self.cells, lab=self.lab, confirm_from_grid=self._confirm_from_grid)
        return result, write_sweep(self.setup.directory, result, self.meta(complete), plots=plots)

    async def run(self, interrupted: asyncio.Event) -> SweepOutcome:
        setup = self.setup
        prepare_directory(setup.directory, resume=setup.resume, force=setup.force)
        if setup.resume:
            self.cells = [c for c in check_resume(setup.directory, self.grid, self.lab, self.scenario_name) if c.ok]
            self.scales = level_scales(self.grid.cells(), asked=setup.time_scale, engine=self.engine.engine,
                                       lab=self.lab, traffic=self._traffic_plan, finished=self.cells)
        for text in self.grid.notes(self.lab.effective(self.lab.baseline).max_num_seqs):
            self.observer.note(f"note: {text}")
        if self.metrics is not None:
            self.observer.note(f"metrics: {self.metrics.url} (speclab's own series, every cell an epoch)")
        grid_plans = self.grid.cells()
        confirm_guess = (1 if setup.confirm_fixed_from_grid else 3) * len(self.grid.load) * self.grid.repeats if setup.confirm else 0
        progress = SweepProgress(total=len(grid_plans) + confirm_guess, done=len(self.cells))
        if not await self._run_plans(remaining(grid_plans, self.cells), progress, interrupted):
            return self._finish(ExitCode.INTERRUPTED, "interrupted; sweep.json holds every finished cell")
        if setup.confirm:
            result, _ = self.write(complete=False, plots=False)
            arms = confirmation_configs(result.recommendation.config(), result.best_fixed)
            if any(a.schedule is not None for a in arms) and not lab_carries_schedules():
                self.observer.note("confirmation pass: skipped; the recommended schedule has more than one range and "
                                   "this speclab's lab file cannot launch a per-batch schedule yet")
                arms = []
            elif not arms:
                self.observer.note("confirmation pass: skipped, no arm beat k=0 anywhere")
            elif setup.confirm_fixed_from_grid:
                self._confirm_from_grid = True
                arms = [a for a in arms if not a.fixed]
                self.observer.note("confirmation pass (quick): " + (
                    "the schedule alone, against the grid's own k=0 and best fixed k cells" if arms else
                    "the recommended schedule is a fixed k the grid measured; its cells are the confirmation"))
            confirm_plans = self.grid.cells("confirm", arms) if arms else []
            progress.total = len(grid_plans) + len(confirm_plans)
            progress.done = len(self.cells)
            progress.phase = "confirm"
            if not await self._run_plans(remaining(confirm_plans, self.cells), progress, interrupted):
                return self._finish(ExitCode.INTERRUPTED, "interrupted; sweep.json holds every finished cell")
        failed = [c for c in self.cells if not c.ok]
        if failed and len(failed) == len(self.cells):
            return self._finish(ExitCode.SERVER_NOT_READY, f"every cell failed; first: {failed[0].error}")
        reason = "ok" if not failed else f"{len(failed)} cell(s) failed and are left out: " + ", ".join(
            c.plan.id for c in failed)
        return self._finish(ExitCode.OK, reason)

    def _finish(self, code: ExitCode, reason: str) -> SweepOutcome:
        result, written = self.write(complete=code == ExitCode.OK, plots=True)
        if self.metrics is not None:
            self.metrics.collector.end()
        return SweepOutcome(code, reason, result, written)

    async def hold_metrics(self, interrupted: asyncio.Event) -> None:
        """Keep serving the final figures ``metrics_hold_s`` (a last scrape), or until interrupted."""
        if self.metrics is None or self.setup.metrics_hold_s <= 0 or interrupted.is_set():
            return
        self.observer.note(f"metrics: serving the final figures {self.setup.metrics_hold_s:g} s more")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(interrupted.wait(), self.setup.metrics_hold_s)

    def close_metrics(self) -> None:
        """Stop serving ``--metrics-port``. Idempotent."""
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    async def _run_plans(self, plans: Sequence[CellPlan], progress: SweepProgress, interrupted: asyncio.Event) -> bool:
        """Run ``plans`` in order; False when interrupted (the unfinished cell is not kept)."""
        for plan in plans:
            if interrupted.is_set():
                return False
            progress.current = plan
            self.observer.cell_started(plan, progress)
            started = time.monotonic()
            cell = await self.run_cell(plan, interrupted)
            if cell is None:
                return False
            elapsed = time.monotonic() - started
            self.cells = [c for c in self.cells if c.plan.id != plan.id] + [cell]
            progress.done += 1
            progress.failed += 0 if cell.ok else 1
            progress.cell_seconds.append(elapsed)
            progress.current = None
            result, _ = self.write(complete=False, plots=False)
            self.observer.cell_finished(cell, progress, result, elapsed)
        return True

    def _traffic_plan(self, plan: CellPlan) -> Plan:
        """The scenario's plan at the cell's load, from its first request, with the grid's warm-up."""
        grid, load = self.grid, plan.load
        length = grid.warmup_s + self.setup.cell_s * CAP_FACTOR
        traffic = build_plan(self.scenario, duration_s=length, seed=self.setup.seed,
                             concurrency=int(load.value) if load.mode == "concurrency" else None,
                             rate=load.value if load.mode == "rate" else None)
        traffic.warmup_s = grid.warmup_s
        traffic.warmup_requests = 0
        return traffic

    async def run_cell(self, plan: CellPlan, interrupted: asyncio.Event) -> CellResult | None:
        """One cell: launch, traffic, report, recording; None when interrupted before it finished."""
        setup = self.setup
        scale = self.scales[plan.load].s
        source: dict[str, Any] = {"recording": f"{CELLS}/{plan.id}", "time_scale": scale}
        try:
            lab, variant = cell_lab(self.lab, plan.config)
        except InputError as error:
            return failed_cell(plan, str(error), source)
        record = setup.directory / CELLS / plan.id
        if record.exists():
            shutil.rmtree(record)  # an unfinished or failed earlier attempt at this cell
        options = RunOptions(scenario=self.setup.scenario, engine=setup.engine, record_path=record,
                             seed=setup.seed, workers=setup.workers, cluster=setup.cluster, variants=(variant,), force=setup.force,
                             drain_timeout_s=setup.drain_timeout_s, time_scale=scale)
        session = LiveSession(options, plan=self._traffic_plan(plan), lab=lab, metrics=self.metrics)
        if self.metrics is not None:
            self._cells_run += 1
            self.metrics.collector.begin_part(str(self._cells_run), {"cell": plan.id, "load": f"{plan.load.mode}={plan.load.value:g}"})
        starting = asyncio.ensure_future(session.ensure_started())
        stop_wait = asyncio.ensure_future(interrupted.wait())
        try:
            await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
        if not starting.done():  # interrupted while a server starts (minutes, for vLLM): do not wait
            await session.stop("interrupted")
            with contextlib.suppress(BaseException):
                await starting
            return None
        try:
            starting.result()
        except SpeclabError as error:
            await session.stop("failed")
            return failed_cell(plan, f"server did not start: {error}", source)
        try:
            await self._learn_versions(session, variant)
            events: list[Event] = []
            final, was_interrupted = await self._follow(session, variant, interrupted, events)
        except BaseException:
            await session.stop("failed")
            raise
        if was_interrupted:
            return None
        report = self.reporter(session, final, False, events)
        with writing(f"--report {record.parent.parent}", f"the cell's {record.name}/report.json"):
            write_text_atomic(record / "report.json", json.dumps(report, indent=2, default=str) + "\n")
        exit_info = report.get("exit") or {}
        down = [e for e in session.events if e.kind == "server_down" and e.variant == variant]
        if exit_info.get("code") in FAILED_EXITS:
            return failed_cell(plan, str(exit_info.get("reason") or exit_info.get("name")), source)
        if down:
            return failed_cell(plan, f"server went down during the cell: {down[0].message}", source)
        return cell_from_report(plan, report, variant=variant, epoch=1, slo=self.grid.slo, samples=session.samples,
                                records=session.records, warmup_s=self.grid.warmup_s, source=source)

    async def _follow(self, session: LiveSession, variant: str, interrupted: asyncio.Event,
                      events: list[Event]) -> tuple[Snapshot, bool]:
        """Run until the cell has its length and every class its minimum requests (or the cap);
        every snapshot's events go into ``events`` (for the report, as `run` keeps them)."""
        assert session.runner is not None
        start = session.time_scale.to_model(session.runner.traffic_start or 0.0)
        enough_at = start + self.grid.warmup_s + self.setup.cell_s

        seen: list[Snapshot] = []

        async def step(snap: Snapshot) -> bool:
            seen[:] = [snap]
            events.extend(snap.events)
            if snap.finished or snap.t < enough_at or not self._enough(snap, variant):
                return False
            await session.stop("complete")
            return True

        final, was_interrupted = await follow(session, interrupted, step)
        if not seen or final is not seen[0]:  # the stop's final snapshot did not pass through ``step``
            events.extend(final.events)
        return final, was_interrupted

    def _enough(self, snap: Snapshot, variant: str) -> bool:
        stats = snap.cumulative.get(variant)
        if stats is None:
            return False
        least = self.grid.min_requests
        return all(name in stats.classes and stats.classes[name].requests >= least for name in self.classes)

    async def _learn_versions(self, session: LiveSession, variant: str) -> None:
        """The engine's version from the first server that answers ``/version`` (for the release note)."""
        if "engine" in self.versions:
            return
        server = session.servers_running.get(variant)
        if server is None:
            return
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            async with session.http.get(f"{server.base_url}/version", headers=server.headers,
                                        timeout=aiohttp.ClientTimeout(total=5)) as resp:
                data = await resp.json(content_type=None)
                if isinstance(data, dict) and data.get("version"):
                    self.versions["engine"] = f"{'vLLM-compatible simulator' if data.get('simulated') else 'vLLM'} " \
                                              f"{data['version']}"
