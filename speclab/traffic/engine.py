"""One worker's share of the plan, fired at every variant from one event loop.

Open loop: the dispatcher sleeps until each of its requests' absolute intended time (never a token
bucket) and starts one task per variant. Closed loop: per variant, N slots each send their next
request the moment the previous one finishes (that moment is the next request's intended time).
Worker ``w`` of ``W`` takes requests ``w, w+W, ...`` (open loop) and ``N/W`` of the slots (closed).
Live controls take a run-clock time ``at`` chosen by the parent, so all workers apply a change at
the same instant and their schedules stay one schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from speclab.model.records import RequestRecord

from .client import Target, run_request, write_tracer
from .health import HealthMonitor
from .schedule import Plan, RateFunction
from .shipping import HEALTH, ISSUED, PHASE_DONE, RECORDS, Emit

_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class EngineSummary:
    worker: int
    started: int
    finished: int
    stopped_early: bool
    cpu_s: float = 0.0  # this process's CPU time during the run (all threads)
    issued: dict[tuple[str, int], int] = field(default_factory=dict)  # (variant, epoch) -> requests begun


class TrafficEngine:
    """Runs inside a worker process (or in-process in tests); ``emit`` receives the messages
    ``shipping`` documents (records, issued counts, health, phase ends) as Python objects."""

    def __init__(
        self,
        plan: Plan,
        targets: list[Target],
        *,
        run_start: float,
        emit: Emit,
        worker: int = 0,
        workers: int = 1,
        sequential: bool = False,
        batch_size: int = 64,
        flush_s: float = 0.1,
        connector_limit: int = 0,
        phase_gate: Callable[[int], Awaitable[float]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        health_interval_s: float = 1.0,
    ) -> None:
        if not targets:
            raise ValueError("no targets")
        self.plan = plan
        self.targets = targets
        self._current: dict[str, Target] = {t.variant: t for t in targets}
        self.run_start = run_start
        self.worker = worker
        self.workers = workers
        self.sequential = sequential
        self._emit = emit
        self._batch_size = batch_size
        self._flush_s = flush_s
        self._connector_limit = connector_limit
        self._phase_gate = phase_gate
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(
            total=plan.request_timeout_s, sock_read=plan.stall_timeout_s, sock_connect=10.0
        )
        self._batch: list[RequestRecord] = []
        self._last_flush = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = 0
        self._finished = 0
        self._issued: dict[tuple[str, int], int] = {}  # every one of these ends in exactly one record
        self._issued_shipped = 0
        self._stopping = False
        self._drain_deadline: float | None = None
        self._origin: float | None = None
        self._origin_set = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._changes: list[asyncio.Event] = []
        self._held: dict[str, asyncio.Event] = {}  # variant -> set when its relaunched server answers
        self._version = 0
        self._rate_override: float | None = None
        self._conc_override: int | None = None
        self._pending_pause: float | None = None
        self._reset_phase_state()
        self.monitor = HealthMonitor(
            worker, run_start, self._counts, lambda h: self._emit((HEALTH, h)),
            on_tick=self._on_tick, clock=clock, interval_s=health_interval_s,
        )
        self._session: aiohttp.ClientSession | None = None

    # ---- clocks ----------------------------------------------------------------------------

    def now(self) -> float:
        return self._clock() - self.run_start

    def _reset_phase_state(self) -> None:
        self._paused = False
        self._pause_tau = 0.0
        self._pause_wall = 0.0
        self._pauses: list[tuple[float, float]] = []  # (active time, duration) of finished pauses
        self._paused_total = 0.0
        self._last_resume = 0.0
        self._rates: RateFunction | None = self.plan.rate_function() if self.plan.mode == "open" else None
        self._conc_steps = list(self.plan.concurrency_steps)
        if self._rate_override is not None and self._rates is not None:
            self._rates.override(0.0, self._rate_override)
        if self._conc_override is not None:
            self._conc_steps = [(0.0, self._conc_override)]

    def active_at(self, t: float) -> float:
        """Active time (pauses excluded) at run-clock time ``t`` in the current phase."""
        if self._origin is None:
            return 0.0
        if self._paused:
            return self._pause_tau
        return max(0.0, t - self._origin - self._paused_total)

    def wall_of(self, tau: float) -> float:
        assert self._origin is not None
        return self._origin + tau + sum(d for p, d in self._pauses if p <= tau)

    # ---- controls (called on the engine's loop) --------------------------------------------

    def begin(self, origin: float) -> None:
        """Start: active time 0 is run-clock time ``origin``."""
        self._origin = origin
        self._last_resume = origin
        self._origin_set.set()
        if self._pending_pause is not None:
            self.pause(max(origin, self._pending_pause))

    def pause(self, at: float | None = None) -> None:
        at = self.now() if at is None else at
        if self._origin is None:
            self._pending_pause = at
            return
        if self._paused:
            return
        self._pause_tau = self.active_at(at)
        self._pause_wall = at
        self._paused = True
        self._resumed.clear()
        self._changed()

    def resume(self, at: float | None = None) -> None:
        at = self.now() if at is None else at
        self._pending_pause = None
        if not self._paused:
            return
        duration = max(0.0, at - self._pause_wall)
        self._pauses.append((self._pause_tau, duration))
        self._paused_total += duration
        self._paused = False
        self._last_resume = at
        self._resumed.set()
        self._changed()

    def set_rate(self, rate: float, at: float | None = None) -> None:
        if self._rates is None:
            raise ValueError("set_rate: this plan is closed loop; use set_concurrency")
        at = self.now() if at is None else at
        self._rate_override = rate
        self._rates.override(self.active_at(at), rate)
        self._changed()

    def set_concurrency(self, n: int, at: float | None = None) -> None:
        if self.plan.mode != "closed":
            raise ValueError("set_concurrency: this plan is open loop; use set_rate")
        at = self.now() if at is None else at
        tau = self.active_at(at)
        self._conc_override = n
        self._conc_steps = [s for s in self._conc_steps if s[0] < tau] + [(tau, n)]
        self._changed()

    def set_target(self, target: Target) -> None:
        """Send a variant's later requests to ``target`` (a relaunched server: its endpoint, headers,
        draft length for estimates, and config epoch); requests in flight finish where they went."""
        if target.variant not in self._current:
            raise ValueError(f"set_target: no variant {target.variant!r} in this run")
        self._current[target.variant] = target
        released = self._held.pop(target.variant, None)
        if released is not None:
            released.set()

    def hold(self, variant: str) -> None:
        """Hold a variant's closed-loop slots while its server relaunches (``set_target`` releases
        them): a slot would otherwise resend the moment each connect to the stopped server fails.
        Open-loop traffic keeps its schedule; what fails meanwhile belongs to the transition."""
        if variant not in self._current:
            raise ValueError(f"hold: no variant {variant!r} in this run")
        self._held.setdefault(variant, asyncio.Event())
    def stop(self, drain_timeout: float, at: float | None = None) -> None:
        at = self.now() if at is None else at
        self._stopping = True
        deadline = at + drain_timeout
        if self._drain_deadline is None or deadline < self._drain_deadline:
            self._drain_deadline = deadline
        self._resumed.set()
        self._origin_set.set()
        for released in self._held.values():
            released.set()
        self._changed()

    def _changed(self) -> None:
        self._version += 1
        for event in self._changes:
            event.set()

    # ---- bookkeeping -----------------------------------------------------------------------

    def _counts(self) -> tuple[int, int, int]:
        return self._started, self._finished, self._started - self._finished

    def _on_sent(self, rec: RequestRecord) -> None:
        if rec.sent is not None:
            self.monitor.note_schedule_lag(rec.sent - rec.intended)

    def _on_written(self, rec: RequestRecord) -> None:
        if rec.sent is not None:
            self.monitor.note_send_delay(self.now() - rec.sent)

    def _sink(self, rec: RequestRecord) -> None:
        self._finished += 1
        self._batch.append(rec)
        if len(self._batch) >= self._batch_size:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._emit((RECORDS, batch))
        self._ship_issued()
        self._last_flush = self.now()

    def _ship_issued(self) -> None:
        """The parent's count of requests begun, so a worker that dies is seen to lose its in-flight ones."""
        total = sum(self._issued.values())
        if total != self._issued_shipped:
            self._issued_shipped = total
            self._emit((ISSUED, dict(self._issued)))

    def _on_tick(self, now: float) -> None:
        if self._batch and now - self._last_flush >= self._flush_s:
            self._flush()
        elif now - self._last_flush >= self._flush_s:
            self._ship_issued()

    def _track(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _send(self, target: Target, index: int, intended: float, tau: float) -> Awaitable[None]:
        assert self._session is not None
        self._started += 1
        target = self._current.get(target.variant, target)
        session = self._session
        return self._counted(target, lambda: run_request(
            session, target, self.plan.request(index), intended, self._sink,
            run_start=self.run_start, timeout=self._timeout, warmup=self.plan.is_warmup(index, tau),
            worker=self.worker, on_sent=self._on_sent, clock=self._clock, time_scale=self.plan.time_scale,
        ))

    async def _counted(self, target: Target, request: Callable[[], Awaitable[None]]) -> None:
        """Count a request as begun once it runs: from here ``run_request`` always yields a record."""
        key = (target.variant, target.epoch)
        self._issued[key] = self._issued.get(key, 0) + 1
        await request()

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> EngineSummary:
        cpu0 = time.process_time()
        connector = aiohttp.TCPConnector(limit=self._connector_limit, limit_per_host=0, ttl_dns_cache=300)
        monitor = asyncio.ensure_future(self.monitor.run())
        try:
            async with aiohttp.ClientSession(connector=connector, trace_configs=[write_tracer(self._on_written)]) as session:
                self._session = session
                await self._origin_set.wait()
                groups = [[t] for t in self.targets] if self.sequential else [self.targets]
                for phase, group in enumerate(groups):
                    if self._stopping:
                        break
                    if phase > 0:
                        self._emit((PHASE_DONE, phase - 1))
                        origin = await self._phase_gate(phase) if self._phase_gate else self.now()
                        self._reset_phase_state()
                        self.begin(origin)
                    if self.plan.mode == "open":
                        await self._open_loop(group)
                    else:
                        await asyncio.gather(*(self._closed_loop(t) for t in group))
                    await self._drain()
                await self._drain()
        finally:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)
            self.monitor.report(self.now())
            self._flush()
        return EngineSummary(
            self.worker, self._started, self._finished, self._stopping, time.process_time() - cpu0, dict(self._issued)
        )

    async def _drain(self) -> None:
        while self._tasks:
            deadline = self._drain_deadline
            remaining = None if deadline is None else deadline - self.now()
            if remaining is not None and remaining <= 0:
                break
            wait = _POLL_S * 4 if remaining is None else min(remaining, _POLL_S * 4)
            await asyncio.wait(set(self._tasks), timeout=wait)
        if self._tasks:
            pending = list(self._tasks)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _open_loop(self, targets: list[Target]) -> None:
        plan, gaps = self.plan, self.plan.unit_gaps()
        index = self.worker
        while not self._stopping:
            if plan.requests is not None and index >= plan.requests:
                return
            assert self._rates is not None
            version = self._version
            tau = self._rates.time_at(gaps.mass(index))
            if plan.duration_s is not None and tau >= plan.duration_s:
                return
            if self._paused and tau >= self._pause_tau:
                await self._resumed.wait()
                continue
            due = self.wall_of(tau)
            delay = due - self.now()
            if delay > _POLL_S:
                await asyncio.sleep(_POLL_S)
                continue
            while delay > 0:  # event-loop timers may fire up to ~1 ms early (uvloop rounds to ms)
                await asyncio.sleep(delay if delay > 0.002 else 0.001)
                if self._version != version:
                    break
                delay = due - self.now()
            if self._version != version:
                continue
            if self._stopping:
                return
            for target in targets:
                self._track(self._send(target, index, due, tau))
            index += self.workers

    def _share(self, total: int) -> int:
        return total // self.workers + (1 if self.worker < total % self.workers else 0)

    def _desired(self, tau: float) -> int:
        return self._share(self.plan.concurrency_at(tau, tuple(self._conc_steps)))

    def _ended(self, tau: float, counter: list[int]) -> bool:
        plan = self.plan
        if self._stopping:
            return True
        if plan.duration_s is not None and tau >= plan.duration_s:
            return True
        return plan.requests is not None and counter[0] >= plan.requests

    async def _closed_loop(self, target: Target) -> None:
        """The slot supervisor for one variant: opens slots as concurrency rises."""
        counter = [self.worker]
        slots: dict[int, asyncio.Task[None]] = {}
        changed = asyncio.Event()
        self._changes.append(changed)
        try:
            while True:
                now = self.now()
                tau = self.active_at(now)
                if self._ended(tau, counter):
                    return
                if not self._paused:
                    desired = self._desired(tau)
                    opened = self._boundary_wall(tau)
                    for k in range(desired):
                        if k not in slots or slots[k].done():
                            slots[k] = self._track(self._slot(target, k, counter, max(opened, self._last_resume)))
                changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError only catches it from 3.11 on
                    await asyncio.wait_for(changed.wait(), self._next_boundary_delay(tau))
        finally:
            self._changes.remove(changed)

    def _boundary_wall(self, tau: float) -> float:
        start = 0.0
        for s, _ in self._conc_steps:
            if s <= tau:
                start = s
        return self.wall_of(start)

    def _next_boundary_delay(self, tau: float) -> float:
        if self._paused:
            return 1.0  # resume sets the change event
        future = [s for s, _ in self._conc_steps if s > tau]
        if self.plan.duration_s is not None:
            future.append(self.plan.duration_s)
        if not future:
            return 1.0
        return max(0.001, min(1.0, self.wall_of(min(future)) - self.now()))

    async def _slot(self, target: Target, k: int, counter: list[int], intended: float) -> None:
        while True:
            if self._paused:
                await self._resumed.wait()
                intended = max(intended, self._last_resume)
            released = self._held.get(target.variant)
            if released is not None and not released.is_set():
                await released.wait()  # the slot frees again when the new server answers
                intended = max(intended, self.now())
                continue
            tau = self.active_at(self.now())
            if self._ended(tau, counter) or k >= self._desired(tau):
                self._changed()  # wake the supervisor: it may be done too
                return
            delay = intended - self.now()
            if delay > 0:  # the first requests of a run (or a new step) wait for their start time
                await asyncio.sleep(delay)
                continue
            index = counter[0]
            counter[0] += self.workers
            await self._send(target, index, intended, tau)
            intended = self.now()
