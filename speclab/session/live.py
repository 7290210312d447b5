"""A live run: servers + traffic + scraping + aggregation + recording, as one snapshot stream.

``LiveSession`` is the composition root both front ends drive. Traffic runs in worker processes;
this process only aggregates, scrapes ``/metrics`` once a second and publishes immutable
snapshots at 4 Hz to every subscriber (the app, the progress printer) and to the recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from speclab import __version__
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.exporter_http import MetricsEndpoint, serve_metrics
from speclab.metrics.run_tally import RunTally
from speclab.metrics.scraper import MetricsScraper
from speclab.metrics.sim_drift import DriftJudge
from speclab.model.errors import InputError
from speclab.model.lab import Lab
from speclab.model.names import INTERVAL_S, SNAPSHOT_HZ
from speclab.model.records import Event, RequestRecord, ServerSample
from speclab.model.snapshot import ClientHealth, Snapshot, coalesce
from speclab.recording.guarded import GuardedWriter
from speclab.recording.preflight import check_outputs
from speclab.recording.writer import RecordingWriter
from speclab.servers.engine import EngineChoice, select_engine
from speclab.servers.manager import RunningServer, ServerManager, attach, parse_attach, probe_attached
from speclab.servers.memory import GpuMemory, gpu_memory
from speclab.servers.pairing import pair_info, require_pairing
from speclab.traffic.cluster import make_runner
from speclab.traffic.health import WorkerHealth
from speclab.traffic.runner import TrafficRunner, TrafficSummary
from speclab.traffic.schedule import Plan, build_plan
from speclab.traffic.wall_plan import wall_plan

from .api import ServerView, SessionInfo
from .options import RunOptions, load_lab_for, load_scenario, parse_headers
from .relaunch import ScheduledChange, check_changes, parse_change, relaunch_variant, run_changes, target_for
from .time_scale import refuse_for_real_engine, resolve_time_scale
from .worker_table import WorkerTable

LAB_RETAIN_INTERVALS = 600
BACKLOG_LIMIT = 8


def publish(queue: asyncio.Queue[Snapshot], snap: Snapshot, limit: int = BACKLOG_LIMIT) -> None:
    """Queue ``snap`` for one subscriber. A slow consumer with ``limit`` snapshots waiting gets them
    coalesced into one (the newest state, every interval and event of all of them), never dropped."""
    if queue.qsize() >= limit:
        merged: Snapshot | None = None
        while not queue.empty():
            older = queue.get_nowait()
            merged = older if merged is None else coalesce(merged, older)
        snap = snap if merged is None else coalesce(merged, snap)
    queue.put_nowait(snap)


def server_view(server: RunningServer, log_lines: int = 40) -> ServerView:
    """What a front end or report shows of a launched (or attached) server; no secrets."""
    return ServerView(
        variant=server.variant, status=server.status, command=server.command, base_url=server.base_url,
        engine=server.engine, settings=dict(server.settings), memory=server.memory.as_dict(),
        log_tail=server.log_tail[-log_lines:] if log_lines else (), baseline=server.baseline,
    )


@contextlib.contextmanager
def real_stdio() -> Iterator[None]:
    """Process stdio while worker processes spawn: a front end (Textual) may have replaced
    sys.stdout/sys.stderr with objects without a file descriptor, which multiprocessing rejects."""
    saved = sys.stdout, sys.stderr
    try:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            try:
                ok = stream.fileno() >= 0
            except (AttributeError, OSError, ValueError):
                ok = False
            if not ok:
                setattr(sys, name, getattr(sys, f"__{name}__"))
        yield
    finally:
        sys.stdout, sys.stderr = saved


class LiveSession:
    """``await start()``, then consume ``snapshots()``; ``await wait()`` for the end; ``await stop()``."""

    def __init__(
        self, options: RunOptions, *, plan: Plan | None = None, lab: Lab | None = None,
        clock: Callable[[], float] = time.monotonic, metrics: MetricsEndpoint | None = None,
    ) -> None:
        """``plan`` and ``lab`` replace the scenario's (``replay --refire`` fires a recorded plan);
        ``metrics`` is an endpoint the caller owns and closes (a sweep's, across its cells)."""
        self.options = options
        self._clock = clock
        check_outputs(options.record_path, options.report_dir, force=options.force)  # exit 2 before any server
        if plan is None:
            scenario, self.scenario_path = load_scenario(options.scenario)
            self.lab: Lab | None = lab or load_lab_for(options, scenario, self.scenario_path)
            plan = build_plan(scenario, duration_s=options.duration, requests=options.requests, rate=options.rate,
                              concurrency=options.concurrency, seed=options.seed)
        else:
            self.scenario_path = Path(options.scenario)
            self.lab = lab
        self.plan: Plan = plan
        # The API key (from --api-key-env, else the lab's server.api_key_env) protects launched
        # servers too; it travels only in the environment of servers and in request headers.
        key_env = options.api_key_env or (self.lab.server.api_key_env if self.lab is not None else None)
        self.headers, self._api_key = parse_headers(options.headers, key_env)
        # Attached servers were not launched here: their engine is whatever they are.
        refuse_for_real_engine(options.time_scale, options.engine)
        self.engine: EngineChoice | None = select_engine(options.engine) if self.lab else None
        self.simulated = bool(self.engine and self.engine.simulated)
        self.engine_label = str(self.engine) if self.engine else "attached servers (not launched by speclab)"
        self.pair: dict[str, Any] = {}
        if self.lab is not None:
            self.pair = pair_info(self.lab, require_pairing(self.lab, force=options.force))
        self.variants = self._variant_names()
        # One S for every simulator of the run; the plan stays modelled, the workers get it in wall time.
        self.time_scale = resolve_time_scale(
            options.time_scale, engine=self.engine.engine if self.engine else None, lab=self.lab,
            variants=self.variants, plan=self.plan, sequential=options.sequential)
        self.classes = tuple(c.name for c in self.plan.classes)
        self.changes: tuple[ScheduledChange, ...] = tuple(parse_change(spec) for spec in options.changes)
        check_changes(self.changes, self.lab, self.variants)
        self.relaunching: set[str] = set()
        self.change_failures: list[str] = []  # scheduled relaunches that failed (the run goes on)
        self.changes_applied: list[ScheduledChange] = []
        self.info = SessionInfo(
            lab=self.lab.name if self.lab else "attached", scenario=self.plan.name, variants=self.variants,
            classes=self.classes, simulated=self.simulated, pair={k: str(v) for k, v in self.pair.items()},
            arrival=self._arrival_facts(), time_scale=self.time_scale.s,
        )
        self.run_start = clock()
        # The all-day lab keeps ten minutes of closed intervals (~15 MB); the cumulative view
        # still counts everything. Headless runs keep all of them for the report's timeline.
        self.aggregator = Aggregator(self.variants, self.classes, interval_s=INTERVAL_S, simulated=self.simulated,
                                     warmup_s=self.plan.warmup_s,
                                     retain_intervals=None if options.keep_intervals else LAB_RETAIN_INTERVALS)
        self.servers_running: dict[str, RunningServer] = {}
        self.manager: ServerManager | None = None
        self.runner: TrafficRunner | None = None
        self.recorder: RecordingWriter | None = None
        self.summary: TrafficSummary | None = None
        self.final: Snapshot | None = None
        # Kept only with keep_records (sweep cells; the recorder has them); the verdict and the
        # cross-check read the tally, which holds nothing per request.
        self.tally = RunTally()
        self.records: list[RequestRecord] = []
        self.samples: list[ServerSample] = []
        self.events: list[Event] = []
        self.gpu_peak: dict[int, GpuMemory] = {}
        self._log_dir = Path(tempfile.mkdtemp(prefix="speclab-logs-"))
        self._subscribers: list[asyncio.Queue[Snapshot]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._paused = False
        self._stopping = False
        self._done = asyncio.Event()  # the final snapshot is out (or there will be none)
        self._finishing = False
        self._finish_task: asyncio.Future[None] | None = None
        self._status = "complete"
        self._health: dict[int, WorkerHealth] = {}
        self.worker_table = WorkerTable()  # each worker's health over the run (measurement.workers)
        self.scrapers: dict[str, MetricsScraper] = {}
        self.drift = DriftJudge()  # the simulators' own clock, judged per interval
        self._down: set[str] = set()
        self._start_task: asyncio.Task[None] | None = None
        # Bound last, once every input has been checked, and before any server starts: a port in
        # use is bad input with nothing launched.
        self.metrics: MetricsEndpoint | None = metrics
        if metrics is None and options.metrics_port is not None:
            self.metrics = serve_metrics(options.metrics_port, options.metrics_host, {"lab": self.info.lab, **self.info.pair})

    # -- setup -----------------------------------------------------------------------------------

    def _variant_names(self) -> tuple[str, ...]:
        if self.lab is None:
            return tuple(parse_attach(spec)[0] for spec in self.options.attach)
        names = self.lab.variant_names
        if self.options.variants:
            unknown = [v for v in self.options.variants if v not in names]
            if unknown:
                raise InputError(f"--variants: lab {self.lab.name!r} has no variant {', '.join(unknown)} "
                                 f"(it has {', '.join(names)})")
            names = tuple(v for v in names if v in self.options.variants)
        return names

    def _arrival_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"mode": self.plan.mode, "process": self.plan.process,
                                 "variants": "sequential" if self.options.sequential else "concurrent"}
        facts.update(self.plan.overrides)
        if self.plan.duration_s is not None:
            facts["duration_s"] = self.plan.duration_s
        if self.plan.requests is not None:
            facts["requests"] = self.plan.requests
        return facts

    def now(self) -> float:
        """The run clock in modelled seconds (wall seconds divided by the time scale)."""
        return self.time_scale.to_model(self._clock() - self.run_start)

    async def sleep(self, modelled_s: float) -> None:
        """Sleep for a span of modelled time (S times as long in wall time)."""
        await asyncio.sleep(self.time_scale.to_wall(max(modelled_s, 0.0)))

    def first_line(self) -> str:
        target = f"lab {self.info.lab}" if self.lab else "attached servers"
        scale = (f"; time scale {self.time_scale.s:g} ({self.time_scale.reason}): figures in modelled time"
                 if self.time_scale.scaled else "")
        return (f"speclab {__version__}: {self.plan.name} on {target} ({', '.join(self.variants)}); "
                f"engine: {self.engine_label}{scale}")

    async def start(self) -> None:
        """Start (or probe) servers, take a baseline scrape, then start traffic and the pump."""
        if self.lab is not None and self.engine is not None:
            self.manager = ServerManager(self.lab, self.engine.engine, log_dir=self._log_dir, api_key=self._api_key,
                                         time_scale=self.time_scale.s)
            self.servers_running = await self.manager.start(self.variants)
        for spec in self.options.attach:
            label, url = parse_attach(spec)
            self.servers_running[label] = await probe_attached(attach(label, url, self.headers))
        if not self.simulated and any(s.simulated for s in self.servers_running.values()):
            self._label_simulated()
        self.run_start = self._clock()  # the run clock starts once servers are up
        self.recorder = self._open_recorder()
        self.http = aiohttp.ClientSession()
        for server in self.servers_running.values():
            if server.engine != "attached":
                server.headers = dict(self.headers)
        for name, server in self.servers_running.items():
            self.aggregator.launch(name, dict(server.settings), baseline=server.baseline)
            self.scrapers[name] = MetricsScraper(server.base_url, name, headers=server.headers,
                                                 names=server.backend.prometheus)
            await self.scrapers[name].scrape(self.http, self.now())  # baseline: deltas start here
        targets = {name: target_for(s, 1) for name, s in self.servers_running.items()}
        self.runner = make_runner(wall_plan(self.plan, self.time_scale.s), targets, cluster=self.options.cluster,
                                  workers=self.options.workers, sequential=self.options.sequential,
                                  run_start=self.run_start, on_records=self._on_records, on_health=self._on_health,
                                  health_interval_s=self.time_scale.to_wall(INTERVAL_S))
        with real_stdio():
            await self.runner.start()
        self._tasks = [asyncio.create_task(self._pump(), name="speclab-pump"),
                       asyncio.create_task(self._scrape_loop(), name="speclab-scrape"),
                       asyncio.create_task(self._await_traffic(), name="speclab-traffic-end")]
        if self.changes:
            start = self.time_scale.to_model(self.runner.traffic_start) if self.runner.traffic_start else self.now()
            self._tasks.append(asyncio.create_task(run_changes(self, self.changes, start), name="speclab-changes"))

    def _label_simulated(self) -> None:
        """An attached speclab.sim is labelled simulated like a launched one, everywhere its numbers go."""
        names = ", ".join(n for n, srv in self.servers_running.items() if srv.simulated)
        self.simulated = self.aggregator.simulated = True
        self.info = dataclasses.replace(self.info, simulated=True)
        self.engine_label += f"; simulated: {names} serve speclab_sim_* series"

    def _open_recorder(self) -> RecordingWriter | None:
        if self.options.record_path is None:
            return None
        manifest = {
            "lab": self.info.lab, "scenario": self.plan.name, "scenario_path": str(self.scenario_path),
            "pair": self.pair, "variants": list(self.variants), "classes": list(self.classes),
            "arrival": self.info.arrival, "simulated": self.simulated, "engine": self.engine_label,
            "speclab_version": __version__, "warmup_s": self.plan.warmup_s, "interval_s": INTERVAL_S,
            "time_scale": self.time_scale.s,
            "servers": {n: {"command": s.command, "settings": s.settings, "memory": s.memory.as_dict(),
                            "engine": s.engine, "baseline": s.baseline} for n, s in self.servers_running.items()},
            "host": {"hostname": platform.node(), "python": platform.python_version(), "platform": platform.platform()},
        }
        secrets = [self._api_key] if self._api_key else []
        writer = GuardedWriter(self.options.record_path, manifest, force=self.options.force, secrets=secrets,
                               on_failure=lambda line: self.add_event(Event(t=self.now(), kind="warning", message=line)))
        writer.write_prompts(self.plan.prompt_items())
        return writer

    # -- data flow -------------------------------------------------------------------------------

    def _on_records(self, records: list[RequestRecord]) -> None:
        self.time_scale.ingest(records)  # wall -> modelled seconds: the one place durations are divided
        if self.options.keep_records:
            self.records.extend(records)
        self.tally.add_records(records)
        self.aggregator.add_records(records)
        if self.recorder is not None:
            self.recorder.write_records(records)

    def _on_health(self, health: WorkerHealth) -> None:
        """Fold the workers' reports for one interval into the client's health for that interval."""
        self._health[health.worker] = health
        self.worker_table.add(health)
        reports = [h for h in self._health.values() if h.interval == health.interval]
        saturated = [h for h in reports if h.saturated]
        self.aggregator.set_health(ClientHealth(
            schedule_lag_p99_ms=max(h.schedule_lag_p99_ms for h in reports),
            loop_lag_max_ms=max(h.loop_lag_max_ms for h in reports),
            cpu_percent=max(h.cpu_percent for h in reports),
            in_flight=sum(h.in_flight for h in reports),
            saturated=bool(saturated),
            reason="; ".join(f"worker {h.worker} on {h.node}: {h.reason}" if h.node else h.reason for h in saturated),
            nodes=len({h.node for h in reports if h.node}),
            workers=len(reports),
            clock_bound_ms=max(h.clock_bound_ms for h in reports),
        ), interval=health.interval)
        if health.saturated and self.recorder is not None:
            self.recorder.mark_saturated(health.interval, self.time_scale.to_model(health.t), health.reason)

    def add_event(self, event: Event) -> None:
        self.events.append(event)
        self.aggregator.add_event(event)
        if self.recorder is not None:
            self.recorder.write_events([event])

    async def _scrape_loop(self) -> None:
        while not self._finishing:
            await self.sleep(INTERVAL_S)
            if self._finishing:  # _write_final takes the last samples itself
                return
            samples = await asyncio.gather(
                *(s.scrape(self.http, self.now()) for s in self.scrapers.values()), return_exceptions=True)
            if self._finishing:
                return
            for failure in (s for s in samples if isinstance(s, BaseException)):
                self.add_event(Event(t=self.now(), kind="warning", message=f"scrape failed: {failure!r}"))
            self._take_samples([s for s in samples if isinstance(s, ServerSample)])
            if self.engine is not None and not self.engine.simulated:
                self._sample_gpu_memory()

    def _sample_gpu_memory(self) -> None:
        """Peak GPU memory per device from NVML (only where a GPU and nvidia-ml-py exist)."""
        for gpu in gpu_memory() or []:
            peak = self.gpu_peak.get(gpu.index)
            if peak is None or gpu.used_gib > peak.used_gib:
                self.gpu_peak[gpu.index] = gpu

    async def scrape_once(self, variant: str) -> None:
        """Scrape one server now (before a relaunch stops it, so its last counts are kept)."""
        scraper = self.scrapers.get(variant)
        if scraper is not None:
            self._take_samples([await scraper.scrape(self.http, self.now())])

    def _take_samples(self, samples: list[ServerSample]) -> None:
        self.tally.add_samples(samples)
        for sample in samples:
            if self.options.keep_records:
                self.samples.append(sample)
            self.aggregator.add_server_sample(sample)
            self._watch_up(sample)
            behind = self.drift.add(sample)
            if behind is not None:
                self.add_event(Event(t=sample.t, kind="sim_behind", variant=sample.variant, message=behind))
        if self.recorder is not None and samples:
            self.recorder.write_samples(samples)

    def _watch_up(self, sample: ServerSample) -> None:
        if not sample.up and sample.variant not in self._down:
            self._down.add(sample.variant)
            server = self.servers_running.get(sample.variant)
            if server is not None and server.status == "ready":
                server.status = "exited"
            self.add_event(Event(t=sample.t, kind="server_down", variant=sample.variant,
                                 message=f"{sample.variant}: /metrics unreachable: {sample.error}"))
        elif sample.up and sample.variant in self._down:
            self._down.discard(sample.variant)
            self.add_event(Event(t=sample.t, kind="server_up", variant=sample.variant,
                                 message=f"{sample.variant}: answering again"))

    async def _pump(self) -> None:
        period = 1.0 / SNAPSHOT_HZ
        while not self._finishing:
            await asyncio.sleep(period)
            if self._finishing:  # the final snapshot is (being) published: nothing may come after it
                return
            now = self.now()
            self.aggregator.tick(now)
            self._publish(self.aggregator.snapshot(now, paused=self._paused))
            if self.recorder is not None:
                self.recorder.write_closed_intervals(self.aggregator)

    def _publish(self, snap: Snapshot) -> None:
        if self.metrics is not None:
            self.metrics.collector.update(snap)
        for queue in self._subscribers:
            publish(queue, snap)

    async def _await_traffic(self) -> None:
        assert self.runner is not None
        self.summary = await self.runner.finished
        await self._finish()

    async def _finish(self) -> None:
        """Publish the final snapshot and close the recording, once, whoever asks first."""
        if self._finish_task is None:
            self._finishing = True  # the pump and scrape loops stop here
            self._finish_task = asyncio.ensure_future(self._write_final())
        await asyncio.shield(self._finish_task)

    async def _write_final(self) -> None:
        try:
            now = self.now()
            for change in self.changes:
                if change not in self.changes_applied and change.variant not in self.relaunching:
                    self.add_event(Event(t=now, kind="warning", variant=change.variant,
                                         message=f"--change {change.spec}: not applied, the run ended at {now:.1f} s"))
            # One last scrape so server-wide counters cover every finished request.
            self._take_samples([await s.scrape(self.http, now) for s in self.scrapers.values()])
            if self.runner is not None:
                self.aggregator.set_planned(self.runner.issued())
            self.aggregator.finish(now)
            self.final = self.aggregator.snapshot(now, paused=self._paused, finished=True)
            self._publish(self.final)
            if self.recorder is not None:
                self.recorder.write_closed_intervals(self.aggregator)
                for name, server in self.servers_running.items():
                    if server.log_path is not None:
                        self.recorder.copy_log(name, server.log_path)
                servers = {n: {"command": s.command, "settings": s.settings} for n, s in self.servers_running.items()}
                self.recorder.close({"status": self._status, "health": asdict(self.final.run_health),
                                     "saturated_intervals": list(self.final.saturated_intervals),
                                     "sim_trailing_intervals": self.drift.trailing(),
                                     "servers": servers, "traffic_errors": self.traffic_errors(),
                                     "planned": [[v, e, n] for (v, e), n in self.runner.issued().items()]
                                     if self.runner is not None else None}, end_s=now)
        finally:
            self._done.set()

    def traffic_errors(self) -> list[str]:
        """What the traffic side lost: dead workers, dropped record batches (exit 6 when any)."""
        return list(self.summary.errors) if self.summary is not None else []

    # -- SnapshotSource ----------------------------------------------------------------------------

    async def ensure_started(self) -> None:
        """Start once, however many consumers ask (the app opens before its servers are up)."""
        if self._start_task is None:
            self._start_task = asyncio.ensure_future(self.start())
        await asyncio.shield(self._start_task)

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        queue: asyncio.Queue[Snapshot] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            await self.ensure_started()
            if self.final is not None:
                yield self.final
                return
            while True:
                snap = await queue.get()
                yield snap
                if snap.finished:
                    return
        finally:
            self._subscribers.remove(queue)

    def servers(self) -> dict[str, ServerView]:
        return {name: server_view(s) for name, s in self.servers_running.items()}

    @property
    def stopped(self) -> bool:
        return self._stopping

    async def wait(self) -> Snapshot:
        await self._done.wait()
        assert self.final is not None
        return self.final

    async def stop(self, status: str = "stopped") -> None:
        """Stop traffic (drain, then cancel), publish the final snapshot, stop servers. Idempotent."""
        if self._stopping:
            await self._done.wait()
            return
        self._stopping = True
        if not self._finishing:
            self._status = status
        try:
            if self._start_task is not None and not self._start_task.done():
                self._start_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._start_task
            if self.runner is not None and not self._finishing:
                self.summary = await self.runner.stop(self.time_scale.to_wall(self.options.drain_timeout_s))
            if self.runner is not None:
                await self._finish()
        finally:
            self._done.set()
            for task in self._tasks:
                if task.get_name() != "speclab-traffic-end":
                    task.cancel()
            for task in self._tasks:
                with contextlib.suppress(BaseException):
                    await task
            if hasattr(self, "http"):
                await self.http.close()
            if self.manager is not None:
                await self.manager.stop()
            shutil.rmtree(self._log_dir, ignore_errors=True)  # the recording has copies

    def close_metrics(self) -> None:
        """Stop serving ``--metrics-port`` (after the front end's last use of it). Idempotent."""
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    # -- LiveControls ------------------------------------------------------------------------------

    async def pause(self) -> None:
        if self.runner is not None:
            await self.runner.pause()
        self._paused = True
        self.add_event(Event(t=self.now(), kind="pause", message="traffic paused"))

    async def resume(self) -> None:
        if self.runner is not None:
            await self.runner.resume()
        self._paused = False
        self.add_event(Event(t=self.now(), kind="resume", message="traffic resumed"))

    async def set_rate(self, rate: float) -> None:
        if self.runner is not None:
            await self.runner.set_rate(self.time_scale.rate_to_wall(rate))  # the user's rate is modelled
        self.add_event(Event(t=self.now(), kind="config_change", message=f"rate -> {rate:g} req/s", data={"rate": rate}))

    async def set_concurrency(self, concurrency: int) -> None:
        if self.runner is not None:
            await self.runner.set_concurrency(concurrency)
        self.add_event(Event(t=self.now(), kind="config_change", message=f"concurrency -> {concurrency}",
                             data={"concurrency": concurrency}))

    async def relaunch(self, variant: str, changes: dict[str, Any]) -> None:
        """A new config epoch for ``variant`` (the app's relaunch and ``--change`` both come here)."""
        await relaunch_variant(self, variant, changes)
