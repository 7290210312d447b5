"""`speclab drill LAB`: the rollback drill through a real HAProxy, measured from outside.

The lab's baseline and speculative pool start behind HAProxy; tenant-tagged traffic goes to the
gateway and each record says which backend answered. The canary tenant is switched to the
speculative pool, then everything is rolled back in one step — at a set time or when a trigger
fires — while :class:`FlipWatcher` reads HAProxy's counters. Whatever happens (a trigger, a dead
server, HAProxy exiting, Ctrl-C) traffic is drained, HAProxy and the servers are stopped, and a
:class:`DrillOutcome` comes back for the report; this module writes no report itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from speclab import __version__
from speclab.gates.drill import Flip, FlipMeasure, GatewayWatch, measure_flip
from speclab.gates.triggers import Fired, TriggerWatch
from speclab.gateway.config import find_haproxy
from speclab.gateway.controller import GatewayController
from speclab.gateway.launch import RunningGateway, start_gateway
from speclab.metrics.exporter_http import serve_metrics
from speclab.model.errors import ServerNotReadyError
from speclab.model.names import INTERVAL_S
from speclab.model.records import Event, RequestRecord
from speclab.model.time_scale import TimeScale
from speclab.recording.preflight import require_writable_dir
from speclab.servers.argv import Engine
from speclab.servers.engine import select_engine
from speclab.servers.pairing import pair_info, require_pairing
from speclab.traffic.client import Target
from speclab.traffic.cluster import make_runner
from speclab.traffic.runner import TrafficRunner, TrafficSummary
from speclab.traffic.wall_plan import wall_plan

from .api import ServerView
from .drill_metrics import DrillMetrics
from .drill_plan import DrillOptions, DrillPlan, resolve
from .drill_watch import FlipWatcher
from .server_watch import server_view
from .signals import catch_interrupts, release_interrupts
from .time_scale import refuse_for_real_engine, resolve_time_scale

WHO = "speclab drill"
DRAIN_TIMEOUT_S = 30.0
INTERRUPT_DRAIN_S = 2.0
WATCH_GRACE_S = 5.0  # after the traffic ends, how long HAProxy's drain may still take to show
IN_FLIGHT_WAIT_S = 2.0  # a scheduled rollback waits this long at most for a speculative request in flight


@dataclass
class DrillOutcome:
    plan: DrillPlan
    engine: str = ""
    time_scale: TimeScale = field(default_factory=TimeScale)
    simulated: bool = True
    records: list[RequestRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    traffic_start: float = 0.0  # run clock of the schedule's offset 0
    end_s: float = 0.0
    switch_s: float | None = None  # run clock: the canary tenant moved
    flip: Flip | None = None
    watch: GatewayWatch | None = None
    measure: FlipMeasure | None = None
    fired: Fired | None = None
    trigger_rows: list[dict[str, object]] = field(default_factory=list)
    servers: dict[str, ServerView] = field(default_factory=dict)
    gateway: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    server_not_ready: str | None = None
    failure: str | None = None  # the gateway or a change failed mid-run
    traffic_errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    metrics: DrillMetrics | None = None  # --metrics-port: still serving; the front end closes it


class _Drill:
    def __init__(self, plan: DrillPlan, out: TextIO, metrics: DrillMetrics | None = None,
                 time_scale: TimeScale | None = None) -> None:
        """``time_scale``: the simulators' S; the drill's clock, its schedule and its records are in
        modelled time (wall time over S), and every wait is stretched by S."""
        self.plan = plan
        self.scale = time_scale or TimeScale()
        self.out = out
        self.metrics = metrics
        self._pump: asyncio.Task[None] | None = None
        self.run_start = time.monotonic()
        self.outcome = DrillOutcome(plan=plan, time_scale=self.scale)
        self.gw: RunningGateway | None = None
        self.controller: GatewayController | None = None
        self.runner: TrafficRunner | None = None
        self.watcher: FlipWatcher | None = None
        self.trigger = TriggerWatch(plan.triggers, plan.trigger_intervals) if plan.triggers else None
        self.rolled_back = asyncio.Event()
        self._stopped = False

    def now(self) -> float:
        return self.scale.to_model(time.monotonic() - self.run_start)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def add_event(self, event: Event) -> None:
        self.outcome.events.append(event)
        self.say(f"event t={event.t - self.outcome.traffic_start:.2f}s {event.kind}: {event.message}")

    def on_records(self, records: list[RequestRecord]) -> None:
        self.scale.ingest(records)  # wall -> modelled seconds, as the records arrive
        self.outcome.records.extend(records)
        if self.metrics is not None:
            self.metrics.add(records)
        switched = self.outcome.switch_s
        if self.trigger is not None and switched is not None and not self.rolled_back.is_set():
            self.trigger.add(r for r in records if r.tenant == self.plan.canary
                             and r.backend in self.plan.speculative and r.sent is not None and r.sent >= switched)

    # -- start and stop --------------------------------------------------------------------------

    async def start(self, engine: Engine, haproxy: str, api_key: str | None) -> None:
        plan = self.plan
        self.gw = await start_gateway(plan.lab, plan.routing, engine=engine, directory=plan.report_dir,
                                      haproxy=haproxy, api_key=api_key, time_scale=self.scale.s)
        self.outcome.servers = {n: server_view(s, log_lines=0) for n, s in self.gw.servers.items()}
        if self.metrics is not None:
            self.metrics.launch(self.gw.servers)
        state = self.gw.state
        self.outcome.gateway = {"url": state.url, "haproxy": state.haproxy, "haproxy_version": state.haproxy_version,
                                "haproxy_pid": state.haproxy_pid, "config": state.config,
                                "tenants_map": state.tenants_map, "routes_map": state.routes_map,
                                "servers": dict(state.servers)}
        self.run_start = time.monotonic()
        self.controller = await self.gw.controller(clock=self.now, sinks=[self.add_event])
        baseline = self.gw.servers[plan.routing.baseline]
        target = Target(variant="gateway", base_url=state.url, model=baseline.model_name or "",
                        headers=dict(baseline.headers))
        self.runner = make_runner(wall_plan(plan.plan, self.scale.s), {"gateway": target}, cluster=plan.cluster,
                                  workers=plan.workers, run_start=self.run_start, on_records=self.on_records,
                                  health_interval_s=self.scale.to_wall(INTERVAL_S))
        await self.runner.start()
        start = self.runner.traffic_start
        self.outcome.traffic_start = self.scale.to_model(start) if start else self.now()
        if self.metrics is not None:
            self._pump = asyncio.create_task(self.metrics.pump(self.now), name="drill-metrics")
        self.say(f"drill: traffic to {state.url} from t=0 for {plan.duration_s:g} s: tenants {plan.control} "
                 f"(control) and {plan.canary} (canary) on {plan.routing.baseline}; {plan.canary} -> {plan.pool} "
                 f"at {plan.switch_at:g} s; rollback at {plan.rollback_at:g} s"
                 + (f" or when {' / '.join(t.spec for t in plan.triggers)} holds for {plan.trigger_intervals} "
                    "intervals" if plan.triggers else ""))

    async def stop_traffic(self, drain_s: float) -> None:
        if self.runner is not None and not self.runner.finished.done():
            summary = await self.runner.stop(self.scale.to_wall(drain_s))
            self.outcome.traffic_errors += summary.errors

    async def stop(self) -> None:
        """Traffic, the watcher's connection, then HAProxy and the servers; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        await self.stop_traffic(INTERRUPT_DRAIN_S)
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump
        if self.watcher is not None and self.outcome.watch is None:
            self.outcome.watch = await self.watcher.finish(0.0)
        if self.controller is not None:
            with contextlib.suppress(Exception):
                await self.controller.close()
        if self.gw is not None:
            await self.gw.stop()
            self.gw.files.socket.unlink(missing_ok=True)  # HAProxy leaves its socket file behind

    # -- the drill itself ------------------------------------------------------------------------

    def at(self, offset: float) -> float:
        """Run-clock time of ``offset`` seconds after traffic starts."""
        return self.outcome.traffic_start + offset

    async def _sleep_until(self, t: float) -> None:
        await asyncio.sleep(self.scale.to_wall(max(0.0, t - self.now())))

    async def switch(self) -> None:
        assert self.controller is not None
        await self._sleep_until(self.at(self.plan.switch_at))
        self.outcome.switch_s = self.now()
        if self.trigger is not None:
            self.trigger.since_s = self.outcome.switch_s
        await self.controller.set(f"tenant:{self.plan.canary}", self.plan.pool, who=WHO)

    async def watch_triggers(self) -> None:
        """Judge every closed interval after the switch; the first trigger to hold rolls back."""
        assert self.trigger is not None
        deadline = self.at(self.plan.rollback_at)
        while self.outcome.switch_s is None:
            await asyncio.sleep(0.05)
        while self.now() < deadline and not self.rolled_back.is_set():
            fired = self.trigger.judge(self.now())
            if fired is not None:
                self.outcome.fired = fired
                await self.rollback(by=fired.trigger.spec, reason=fired.message)
                return
            await asyncio.sleep(0.1)

    async def scheduled_rollback(self) -> None:
        await self._sleep_until(self.at(self.plan.rollback_at))
        while self.outcome.switch_s is None:
            await asyncio.sleep(0.05)
        if not self.rolled_back.is_set():
            await self.rollback(by="schedule", reason=f"--rollback-at {self.plan.rollback_at:g} s",
                                wait_for_in_flight_s=IN_FLIGHT_WAIT_S)

    async def rollback(self, *, by: str, reason: str, wait_for_in_flight_s: float = 0.0) -> None:
        if self.rolled_back.is_set():
            return
        self.rolled_back.set()
        assert self.controller is not None and self.gw is not None
        self.watcher = FlipWatcher(self.gw.state.socket, self.plan.speculative, self.now)
        await self.watcher.before_flip(wait_for_in_flight_s)  # modelled seconds: the watcher's clock is self.now
        self.say(f"drill: rollback at t={self.now() - self.outcome.traffic_start:.2f}s ({reason})")
        command = self.now()
        self.watcher.start(command)
        confirmed: float | None = None
        try:
            await self.controller.rollback(who=f"{WHO} ({reason})")
            confirmed = self.now()  # rollback() returns once HAProxy's routing read back rolled back
        finally:
            self.watcher.confirmed_s = confirmed
            self.outcome.flip = Flip(command_s=command, confirmed_s=confirmed, speculative=self.plan.speculative,
                                     by=by)

    async def watch_haproxy(self) -> None:
        assert self.gw is not None
        while self.gw.haproxy_exited is None:
            await asyncio.sleep(0.25)
        self.outcome.failure = f"gateway: haproxy exited with status {self.gw.haproxy_exited} during the drill"

    async def run(self, interrupted: asyncio.Event) -> None:
        assert self.runner is not None
        tasks: list[asyncio.Future[Any]] = [asyncio.create_task(self.switch(), name="drill-switch"),
                 asyncio.create_task(self.scheduled_rollback(), name="drill-rollback")]
        if self.trigger is not None:
            tasks.append(asyncio.create_task(self.watch_triggers(), name="drill-triggers"))
        ends: set[asyncio.Future[Any]] = {asyncio.ensure_future(self.runner.finished),
                                          asyncio.create_task(interrupted.wait()),
                                          asyncio.create_task(self.watch_haproxy())}
        try:
            pending: set[asyncio.Future[Any]] = {*tasks, *ends}
            while True:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                failed = [t for t in done if t in tasks and not t.cancelled() and t.exception() is not None]
                if failed:
                    error = failed[0].exception()
                    self.outcome.failure = f"drill: a routing change failed: {error}"
                    return
                if done & ends:
                    self.outcome.interrupted = interrupted.is_set()
                    return
        finally:
            for task in [*tasks, *ends]:
                if not task.done():
                    task.cancel()
            for task in [*tasks, *ends]:
                with contextlib.suppress(BaseException):
                    await task

    async def finish(self) -> None:
        """After the traffic: let HAProxy's view of the drain complete, then measure the flip."""
        outcome = self.outcome
        if self.runner is not None and self.runner.finished.done() and not self.runner.finished.cancelled():
            summary: TrafficSummary = self.runner.finished.result()
            outcome.traffic_errors += summary.errors
        if self.watcher is not None:
            outcome.watch = await self.watcher.finish(self.scale.to_wall(WATCH_GRACE_S))
        outcome.end_s = self.now()
        if self.metrics is not None:
            self.metrics.finish(outcome.end_s)
        if self.trigger is not None:
            outcome.trigger_rows = list(self.trigger.judged)
        if outcome.flip is not None and outcome.watch is not None:
            outcome.measure = measure_flip(outcome.records, outcome.flip, outcome.watch)


async def run_drill(options: DrillOptions, out: TextIO = sys.stdout,
                    on_ready: Callable[[DrillPlan], None] | None = None) -> DrillOutcome:
    """Run the drill; stop everything whatever happens; return what was measured."""
    refuse_for_real_engine(options.time_scale, options.engine)
    plan = resolve(options)  # bad input: exit 2 before anything starts
    haproxy = find_haproxy(options.haproxy)
    engine = select_engine(options.engine)
    scale = resolve_time_scale(options.time_scale, engine=engine.engine, lab=plan.lab,
                               variants=tuple(plan.routing.variants), plan=plan.plan)
    require_writable_dir(plan.report_dir, "--report")  # the last input check: not when the gateway writes its files
    metrics = None
    if options.metrics_port is not None:  # every input checked, nothing started: a port in use is exit 2
        pair = pair_info(plan.lab, require_pairing(plan.lab, force=True))
        endpoint = serve_metrics(options.metrics_port, options.metrics_host,
                                 {"lab": plan.lab.name, **{k: str(v) for k, v in pair.items()}, "time_scale": scale.s})
        metrics = DrillMetrics(endpoint, plan.routing.variants, [c.name for c in plan.plan.classes],
                               simulated=engine.simulated, warmup_s=plan.plan.warmup_s)
    drill = _Drill(plan, out, metrics, scale)
    drill.outcome.engine, drill.outcome.simulated = str(engine), engine.simulated
    drill.say(f"speclab {__version__} drill: lab {plan.lab.name} ({plan.routing.baseline}, {plan.pool}) x "
              f"{plan.plan.name}; engine: {engine}"
              + (f"; time scale {scale.s:g} ({scale.reason}): figures in modelled time" if scale.scaled else ""))
    if metrics is not None:
        drill.say(f"metrics: {metrics.url} (speclab's own series per backend, for Prometheus)")
    api_key = os.environ.get(plan.lab.server.api_key_env) if plan.lab.server.api_key_env else None
    interrupted = catch_interrupts()
    started = time.monotonic()
    try:
        start = asyncio.create_task(drill.start(engine.engine, haproxy, api_key))
        stop_wait = asyncio.create_task(interrupted.wait())
        await asyncio.wait({start, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not start.done():
            start.cancel()
            with contextlib.suppress(BaseException):
                await start
            drill.outcome.interrupted = True
        else:
            stop_wait.cancel()
            start.result()
            if on_ready is not None:
                on_ready(plan)
            await drill.run(interrupted)
        await drill.stop_traffic(INTERRUPT_DRAIN_S if drill.outcome.interrupted else DRAIN_TIMEOUT_S)
        await drill.finish()
    except ServerNotReadyError as error:
        drill.outcome.server_not_ready = str(error)
        drill.say(f"error: {error}")
    except BaseException:
        if metrics is not None:
            metrics.close()
        raise
    finally:
        try:
            await drill.stop()
        finally:
            release_interrupts()
    drill.outcome.wall_s = round(time.monotonic() - started, 3)
    if metrics is not None:
        metrics.finish(drill.outcome.end_s or drill.now())  # a drill that never got to finish()
        drill.outcome.metrics = metrics
    return drill.outcome
