"""The traffic facade the session drives from the parent process.

``TrafficRunner`` spawns the worker processes, waits until each has its event loop and HTTP
session up, then gives them one common start time so start-up costs never show as schedule lag.
Live controls carry the run-clock moment they were asked, so every worker re-times from the same
instant. Records and health come back in small batches, to callbacks or to ``async for``.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from speclab.model import limits as L
from speclab.model.errors import InputError
from speclab.model.limits import check_option
from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.servers.launcher import launch

from .client import Target
from .engine import EngineSummary
from .health import WorkerHealth
from .schedule import Plan, build_plan
from .shipping import DONE, ERROR, HEALTH, ISSUED, PHASE_DONE, READY, RECORDS, Message, from_wire
from .worker import WorkerConfig, worker_main

READY_TIMEOUT_S = 60.0
START_DELAY_S = 0.1
_END = object()


def start_without_sigint(proc: Any) -> None:
    """Start a worker with SIGINT blocked, so a terminal's Ctrl-C (sent to the whole process group)
    reaches only the parent, which drains the workers; the child inherits the mask through exec
    and ignores SIGINT from its first instruction (``worker_main``), imports included."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@dataclass
class TrafficSummary:
    workers: int
    started: int = 0  # requests handed to the client (one per variant)
    records: int = 0  # records delivered
    stopped_early: bool = False
    traffic_start: float | None = None  # run clock time of the schedule's offset 0
    cpu_s: float = 0.0  # CPU time the workers spent on the run, summed
    errors: list[str] = field(default_factory=list)  # dead workers, dropped record batches
    issued: dict[tuple[str, int], int] = field(default_factory=dict)  # (variant, epoch) -> requests begun


class TrafficRunner:
    """Fires ``plan_or_scenario`` at every target. Without callbacks, ``async for item in runner``
    yields ``list[RequestRecord]`` batches and ``WorkerHealth`` reports until the run ends."""

    def __init__(
        self,
        plan_or_scenario: Plan | Scenario,
        targets: dict[str, Target],
        *,
        workers: int = 1,
        sequential: bool = False,
        run_start: float,
        on_records: Callable[[list[RequestRecord]], None] | None = None,
        on_health: Callable[[WorkerHealth], None] | None = None,
        batch_size: int = 64,
        connector_limit: int = 0,
        health_interval_s: float = 1.0,
    ) -> None:
        """``health_interval_s``: the wall length of a health interval (S under a time scale S)."""
        if not targets:
            raise InputError("no targets to send traffic to")
        check_option("--workers", workers, 1, L.MAX_WORKERS)
        self.plan = plan_or_scenario if isinstance(plan_or_scenario, Plan) else build_plan(plan_or_scenario)
        self.targets = dict(targets)
        self.workers = workers
        self.sequential = sequential
        self.run_start = run_start
        self.traffic_start: float | None = None
        self._on_records = on_records
        self._on_health = on_health
        self._batch_size = batch_size
        self._connector_limit = connector_limit
        self._health_interval_s = health_interval_s
        self._procs: list[Any] = []
        self._ctrl: list[Connection] = []
        self._data: list[Connection] = []
        self._alive: set[int] = set()
        self._ready: set[int] = set()
        self._phase_done: dict[int, set[int]] = {}
        self._phases_begun: set[int] = set()
        self._reported: set[int] = set()  # workers that sent "done" or "error"
        self._issued: dict[int, dict[tuple[str, int], int]] = {}  # per worker, its latest count
        self._summary = TrafficSummary(workers=workers)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ready_event = asyncio.Event()
        self._finished: asyncio.Future[TrafficSummary] | None = None
        self._paused = False
        self._finishing: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.run_start

    @property
    def finished(self) -> asyncio.Future[TrafficSummary]:
        """Resolves with the summary once every worker has ended and every record was delivered."""
        if self._finished is None:
            self._finished = asyncio.get_running_loop().create_future()
        return self._finished

    @property
    def paused(self) -> bool:
        return self._paused

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        _ = self.finished
        ctx = multiprocessing.get_context("spawn")
        targets = list(self.targets.values())
        for w in range(self.workers):
            ctrl_child, ctrl_parent = ctx.Pipe(duplex=False)
            data_parent, data_child = ctx.Pipe(duplex=False)
            config = WorkerConfig(
                plan=self.plan, targets=targets, worker=w, workers=self.workers,
                sequential=self.sequential, run_start=self.run_start, batch_size=self._batch_size,
                connector_limit=self._connector_limit, health_interval_s=self._health_interval_s,
            )
            proc = ctx.Process(
                target=worker_main, args=(config, ctrl_child, data_child), name=f"speclab-traffic-{w}", daemon=True
            )
            await launch(start_without_sigint, proc)  # at the process's own priority, never the app's
            ctrl_child.close()
            data_child.close()
            self._procs.append(proc)
            self._ctrl.append(ctrl_parent)
            self._data.append(data_parent)
            self._alive.add(w)
            loop.add_reader(data_parent.fileno(), self._on_data, w)
        try:
            await asyncio.wait_for(self._ready_event.wait(), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self._kill_all()
            raise InputError(f"traffic workers did not start within {READY_TIMEOUT_S:g} s") from None
        if len(self._alive) < self.workers:
            errors = "; ".join(self._summary.errors)
            await self._kill_all()
            raise InputError(f"traffic workers failed to start: {errors}")
        self.traffic_start = self.now() + START_DELAY_S
        self._summary.traffic_start = self.traffic_start
        self._broadcast(("begin", self.traffic_start))

    async def pause(self) -> None:
        self._paused = True
        self._broadcast(("pause", self.now()))

    async def resume(self) -> None:
        self._paused = False
        self._broadcast(("resume", self.now()))

    async def set_rate(self, rate: float) -> None:
        if self.plan.mode != "open":
            raise InputError("rate: this run is closed loop (fixed concurrency); change the concurrency instead")
        check_option("rate", rate, 0, L.MAX_RATE, low_open=True)
        self._broadcast(("set_rate", float(rate), self.now()))

    async def set_concurrency(self, n: int) -> None:
        if self.plan.mode != "closed":
            raise InputError("concurrency: this run is open loop (a request rate); change the rate instead")
        check_option("concurrency", n, 1, L.MAX_CONCURRENCY)
        self._broadcast(("set_concurrency", int(n), self.now()))

    async def set_target(self, target: Target) -> None:
        """Every worker sends the variant's next requests to ``target`` (after a relaunch)."""
        if target.variant not in self.targets:
            raise InputError(f"set_target: no variant {target.variant!r} in this run")
        self.targets[target.variant] = target
        self._broadcast(("set_target", target))

    async def hold(self, variant: str) -> None:
        """Every worker holds the variant's closed-loop slots until the next ``set_target``."""
        if variant not in self.targets:
            raise InputError(f"hold: no variant {variant!r} in this run")
        self._broadcast(("hold", variant))

    async def stop(self, drain_timeout: float) -> TrafficSummary:
        """Stop sending; drain in-flight requests up to ``drain_timeout``, then cancel them."""
        self._summary.stopped_early = True
        if not self._procs and not self.finished.done():
            self.finished.set_result(self._summary)  # never started
            self._queue.put_nowait(_END)
        self._broadcast(("stop", float(drain_timeout), self.now()))
        try:
            return await asyncio.wait_for(asyncio.shield(self.finished), drain_timeout + 15.0)
        except asyncio.TimeoutError:
            await self._kill_all()
            return await self.finished

    async def __aiter__(self) -> AsyncIterator[list[RequestRecord] | WorkerHealth]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item

    # ---- plumbing --------------------------------------------------------------------------

    def _broadcast(self, message: tuple[Any, ...]) -> None:
        for w in sorted(self._alive):
            with contextlib.suppress(OSError):
                self._ctrl[w].send(message)

    def _on_data(self, w: int) -> None:
        conn = self._data[w]
        try:
            while conn.poll():
                self._handle(w, conn.recv())
        except (EOFError, OSError):
            self._worker_ended(w)

    def _handle(self, w: int, message: Message) -> None:
        kind, payload = from_wire(message)
        if kind == RECORDS:
            self._summary.records += len(payload)
            self._deliver(self._on_records, payload)
        elif kind == HEALTH:
            self._deliver(self._on_health, payload)
        elif kind == ISSUED:
            self._issued[w] = payload
        elif kind == READY:
            self._ready.add(w)
            if len(self._ready) == self.workers:
                self._ready_event.set()
        elif kind == PHASE_DONE:
            self._phase_done.setdefault(payload, set()).add(w)
            self._maybe_begin_phases()
        elif kind == DONE:
            summary: EngineSummary = payload
            self._summary.started += summary.started
            self._summary.cpu_s += summary.cpu_s
            self._issued[w] = summary.issued
            self._reported.add(w)
        elif kind == ERROR:
            self._summary.errors.append(str(payload))
            self._reported.add(w)

    def _maybe_begin_phases(self) -> None:
        """Every worker finished phase p: all begin phase p+1 at one common time."""
        for phase, done in self._phase_done.items():
            if phase + 1 not in self._phases_begun and self._alive and done >= self._alive:
                self._phases_begun.add(phase + 1)
                self._broadcast(("phase", phase + 1, self.now() + START_DELAY_S))

    def _deliver(self, callback: Callable[[Any], None] | None, item: Any) -> None:
        if callback is None:
            self._queue.put_nowait(item)
            return
        try:
            callback(item)
        except Exception as error:  # a consumer bug must not stop the stream of records
            what = f"a batch of {len(item)} records was dropped" if isinstance(item, list) else "a health report was dropped"
            self._summary.errors.append(f"{what}: consumer callback failed: {type(error).__name__}: {error}")

    def _close_channel(self, w: int) -> None:
        """Stop listening to worker ``w`` (its pipes here; a cluster actor's pull loop there)."""
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._data[w].fileno())
        with contextlib.suppress(OSError):
            self._data[w].close()
        with contextlib.suppress(OSError):
            self._ctrl[w].close()

    def _worker_ended(self, w: int) -> None:
        loop = asyncio.get_running_loop()
        self._close_channel(w)
        self._alive.discard(w)
        if w not in self._ready:
            self._summary.errors.append(f"traffic worker {w} exited before it was ready")
            self._ready.add(w)
            if len(self._ready) == self.workers:
                self._ready_event.set()
        self._maybe_begin_phases()
        if not self._alive and self._finishing is None:
            self._finishing = loop.create_task(self._finish())

    async def _reap(self, w: int) -> str:
        """Wait for worker ``w`` to be gone; how it ended, for an error line."""
        proc = self._procs[w]
        await asyncio.get_running_loop().run_in_executor(None, proc.join, 5.0)
        return f"exit code {proc.exitcode}"

    async def _finish(self) -> None:
        for w in range(len(self._procs)):
            how = await self._reap(w)
            if w not in self._reported:
                self._summary.errors.append(f"traffic worker {w} ended without a summary ({how})")
        self._summary.issued = self.issued()
        self._queue.put_nowait(_END)
        if not self.finished.done():
            self.finished.set_result(self._summary)

    def issued(self) -> dict[tuple[str, int], int]:
        """Requests begun per (variant, epoch), over all workers (a dead one's as it last reported)."""
        out: dict[tuple[str, int], int] = {}
        for counts in self._issued.values():
            for key, n in counts.items():
                out[key] = out.get(key, 0) + n
        return out

    async def _kill_all(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        loop = asyncio.get_running_loop()
        for proc in self._procs:
            await loop.run_in_executor(None, proc.join, 5.0)
        for w in list(self._alive):
            self._worker_ended(w)
