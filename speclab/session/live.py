"""A live run: servers + traffic + scraping + aggregation + recording, as one snapshot stream.

``LiveSession`` is what both front ends drive. It is handed its collaborators (``live_parts``:
the server manager, traffic runner, scrapers, aggregator, recorder, metrics endpoint and clock)
and wires them: traffic runs in worker processes; this process only aggregates, scrapes
``/metrics`` once a second and publishes immutable snapshots at 4 Hz on the ``SnapshotBus`` to
every subscriber (the app, the progress printer, the exporter) and to the recorder. The server
watcher and the traffic controls are small objects of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import platform
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from speclab import __version__
from speclab.metrics.exporter_http import MetricsEndpoint
from speclab.metrics.interval_spill import SpilledIntervalStore
from speclab.metrics.run_tally import RunTally
from speclab.metrics.scraper import MetricsScraper
from speclab.metrics.sim_drift import DriftJudge
from speclab.model.errors import InputError
from speclab.model.lab import Lab
from speclab.model.names import INTERVAL_S, SNAPSHOT_HZ
from speclab.model.records import Event, RequestRecord, ServerSample
from speclab.model.snapshot import ClientHealth, Snapshot
from speclab.recording.preflight import check_outputs
from speclab.recording.writer import RecordingWriter
from speclab.servers.manager import RunningServer, ServerManager, attach, parse_attach, probe_attached
from speclab.servers.memory import GpuMemory
from speclab.traffic.health import WorkerHealth
from speclab.traffic.runner import TrafficRunner, TrafficSummary
from speclab.traffic.schedule import Plan
from speclab.traffic.wall_plan import wall_plan

from .api import ServerView
from .controls import TrafficControls
from .live_parts import Collaborators, resolve_inputs
from .options import RunOptions
from .relaunch import ScheduledChange, relaunch_variant, run_changes, target_for
from .server_watch import GpuPeak, ServerWatcher, server_view
from .snapshot_bus import SnapshotBus
from .stdio import real_stdio
from .worker_table import WorkerTable

LAB_RETAIN_INTERVALS = 600


class LiveSession:
    """``await start()``, then consume ``snapshots()``; ``await wait()`` for the end; ``await stop()``."""

    def __init__(
        self, options: RunOptions, *, plan: Plan | None = None, lab: Lab | None = None,
        metrics: MetricsEndpoint | None = None, collaborators: Collaborators | None = None,
    ) -> None:
        """``plan`` and ``lab`` replace the scenario's (``replay --refire`` fires a recorded plan);
        ``metrics`` is an endpoint the caller owns and closes (a sweep's, across its cells);
        ``collaborators`` replace the real server manager, traffic runner, scrapers, aggregator,
        recorder, metrics endpoint or clock."""
        self.options = options
        self.make = collaborators or Collaborators()
        self._clock = self.make.clock
        check_outputs(options.record_path, options.report_dir, force=options.force)  # exit 2 before any server
        inputs = resolve_inputs(options, plan=plan, lab=lab)
        self.lab, self.scenario_path, self.plan = inputs.lab, inputs.scenario_path, inputs.plan
        self.headers, self._api_key = inputs.headers, inputs.api_key
        self.engine, self.engine_label, self.pair = inputs.engine, inputs.engine_label, inputs.pair
        self.simulated, self.time_scale = inputs.info.simulated, inputs.time_scale
        self.variants, self.classes, self.changes = inputs.variants, inputs.info.classes, inputs.changes
        self.info = inputs.info
        self.relaunching: set[str] = set()
        self.change_failures: list[str] = []  # scheduled relaunches that failed (the run goes on)
        self.changes_applied: list[ScheduledChange] = []
        self.run_start = self._clock()
        # The all-day lab keeps ten minutes of closed intervals (~15 MB); the cumulative view
        # still counts everything. Headless runs keep all of them for the report's timeline, in a
        # temporary file, so the parent's memory does not grow with the run's length.
        keep = options.keep_intervals
        self.aggregator = self.make.aggregator(self.variants, self.classes, interval_s=INTERVAL_S, simulated=self.simulated,
                                     warmup_s=self.plan.warmup_s, retain_intervals=None if keep else LAB_RETAIN_INTERVALS,
                                     store=SpilledIntervalStore() if keep else None)
        self.servers_running: dict[str, RunningServer] = {}
        self.manager: ServerManager | None = None
        self.runner: TrafficRunner | None = None
        self.recorder: RecordingWriter | None = None
        self.summary: TrafficSummary | None = None
        self.final: Snapshot | None = None
        # Kept only with keep_records (sweep cells); the verdict and the cross-check read the tally
        # (per variant and epoch, as the aggregator), which holds nothing per request.
        self.tally = RunTally(book=self.aggregator.book)
        self.records: list[RequestRecord] = []
        self.samples: list[ServerSample] = []
        self.events: list[Event] = []
        self._gpu = GpuPeak()
        self._log_dir = Path(tempfile.mkdtemp(prefix="speclab-logs-"))
        self.bus = SnapshotBus()
        self._tasks: list[asyncio.Task[Any]] = []
        self.controls = TrafficControls(lambda: self.runner, self.add_event, self.now, self.time_scale.rate_to_wall)
        self._stopping = False
        self._done = asyncio.Event()  # the final snapshot is out (or there will be none)
        self._finishing = False
        self._finish_task: asyncio.Future[None] | None = None
        self._scraping = asyncio.Lock()  # one read of the servers at a time: their counters are deltas
        self._status = "complete"
        self._health: dict[int, WorkerHealth] = {}
        self.worker_table = WorkerTable()  # each worker's health over the run (measurement.workers)
        self.scrapers: dict[str, MetricsScraper] = {}
        self.drift = DriftJudge()  # the simulators' own clock, judged per interval
        self._watcher = ServerWatcher(lambda: self.servers_running, self.add_event)
        self._start_task: asyncio.Task[None] | None = None
        # Bound last, once every input has been checked, and before any server starts: a port in
        # use is bad input with nothing launched.
        self.metrics: MetricsEndpoint | None = metrics
        if metrics is None and options.metrics_port is not None:
            self.metrics = self.make.metrics(options.metrics_port, options.metrics_host,
                                             {"lab": self.info.lab, **self.info.pair})
        if self.metrics is not None:
            self.metrics.collector.set_time_scale(self.time_scale.s)
            self.metrics.collector.expect_classes(self.classes)
            self.bus.listen(self.metrics.collector.update)

    # -- setup -----------------------------------------------------------------------------------

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
            self.manager = self.make.servers(self.lab, self.engine.engine, log_dir=self._log_dir, api_key=self._api_key,
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
            self.scrapers[name] = self.make.scraper(server.base_url, name, headers=server.headers,
                                                 names=server.backend.prometheus)
        # baseline reads, all at once (a /metrics that hangs costs its timeout once): deltas start here
        await asyncio.gather(*(s.scrape(self.http, self.now()) for s in self.scrapers.values()))
        targets = {name: target_for(s, 1) for name, s in self.servers_running.items()}
        self.runner = self.make.traffic(wall_plan(self.plan, self.time_scale.s), targets, cluster=self.options.cluster,
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
        writer = self.make.recorder(self.options.record_path, manifest, force=self.options.force, secrets=secrets,
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
            send_delay_p99_ms=max(h.send_delay_p99_ms for h in reports),
            read_lateness_ms=max(h.read_lateness_ms for h in reports),
            saturated=bool(saturated),
            reason="; ".join(f"worker {h.worker} on {h.node}: {h.reason}" if h.node else h.reason for h in saturated),
            nodes=len({h.node for h in reports if h.node}),
            workers=len(reports),
            clock_bound_ms=max(h.clock_bound_ms for h in reports),
        ), interval=health.interval)
        if health.saturated and self.recorder is not None:
            self.recorder.mark_saturated(health.interval, self.time_scale.to_model(health.t), health.reason)

    def add_event(self, event: Event) -> None:
        if self.options.keep_records:
            self.events.append(event)
        self.tally.add_event(event, self.servers_running)  # before a relaunch replaces the server
        self.aggregator.add_event(event)
        if self.recorder is not None:
            self.recorder.write_events([event])

    async def _scrape_loop(self) -> None:
        while not self._finishing:
            await self.sleep(INTERVAL_S)
            if self._finishing:  # _write_final takes the last samples itself
                return
            await asyncio.shield(self._scrape_all())
            if not self._finishing and self.engine is not None and not self.engine.simulated:
                self._gpu.sample()

    async def _scrape_all(self) -> None:
        """One scrape of every server (a relaunching one is read by its relaunch), its samples always
        taken. A scraper's counters are deltas from its previous read: a sample dropped would lose
        those counts from the server side of the acceptance cross-check, and two reads of one server
        at once could be parsed out of order (a counter seen going down reads as a restart)."""
        async with self._scraping:
            samples = await asyncio.gather(*(s.scrape(self.http, self.now()) for v, s in self.scrapers.items()
                                             if v not in self.relaunching), return_exceptions=True)
            for failure in (s for s in samples if isinstance(s, BaseException)):
                self.add_event(Event(t=self.now(), kind="warning", message=f"scrape failed: {failure!r}"))
            self._take_samples([s for s in samples if isinstance(s, ServerSample)])

    @property
    def gpu_peak(self) -> dict[int, GpuMemory]:
        return self._gpu.peak

    async def scrape_once(self, variant: str) -> None:
        """Scrape one server now (before a relaunch stops it, so its last counts are kept)."""
        scraper = self.scrapers.get(variant)
        if scraper is not None:
            async with self._scraping:
                self._take_samples([await scraper.scrape(self.http, self.now())])

    def _take_samples(self, samples: list[ServerSample]) -> None:
        self.tally.add_samples(samples)
        for sample in samples:
            if self.options.keep_records:
                self.samples.append(sample)
            self.aggregator.add_server_sample(sample)
            self._watcher.watch(sample)
            behind = self.drift.add(sample)
            if behind is not None:
                self.add_event(Event(t=sample.t, kind="sim_behind", variant=sample.variant, message=behind))
        if self.recorder is not None and samples:
            self.recorder.write_samples(samples)

    async def _pump(self) -> None:
        period = 1.0 / SNAPSHOT_HZ
        while not self._finishing:
            await asyncio.sleep(period)
            if self._finishing:  # the final snapshot is (being) published: nothing may come after it
                return
            now = self.now()
            self.aggregator.tick(now)
            self._publish(self.aggregator.snapshot(now, paused=self.controls.paused))
            if self.recorder is not None:
                self.recorder.write_closed_intervals(self.aggregator)

    def _publish(self, snap: Snapshot) -> Snapshot:
        """Hand ``snap`` on with each worker's health (the aggregator knows only their fold)."""
        snap = dataclasses.replace(snap, workers=self.worker_table.view())
        self.bus.publish(snap)
        return snap

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
            # One last scrape so server-wide counters cover every finished request (after any
            # read already on its way, whose samples are taken too).
            async with self._scraping:
                self._take_samples([await s.scrape(self.http, now) for s in self.scrapers.values()])
            await self._watcher.settle()  # a server that died: its exit cause is in the final snapshot
            if self.runner is not None:
                self.aggregator.set_planned(self.runner.issued())
            self.aggregator.finish(now)
            self.final = self._publish(self.aggregator.snapshot(now, paused=self.controls.paused, finished=True))
            if self.recorder is not None:
                self.recorder.write_closed_intervals(self.aggregator)
                for name, server in self.servers_running.items():
                    if server.log_path is not None:
                        self.recorder.copy_log(name, server.log_path)
                servers = {n: {"command": s.command, "settings": s.settings, "memory": s.memory.as_dict()}
                           for n, s in self.servers_running.items()}
                self.recorder.close({"status": self._status, "health": asdict(self.final.run_health),
                                     "saturated_intervals": list(self.final.saturated_intervals),
                                     "sim_trailing_intervals": self.drift.trailing(),
                                     "workers": self.worker_table.rows(),
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
        queue = self.bus.subscribe()
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
            self.bus.unsubscribe(queue)

    def servers(self) -> dict[str, ServerView]:
        return {name: server_view(s) for name, s in self.servers_running.items()}

    @property
    def servers_exited(self) -> dict[str, str]:
        """Launched variants whose server exited during the run (and was not relaunched), and why.
        An attached server whose /metrics stops answering may still serve: its requests say so."""
        return dict(self._watcher.exited)

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

    def _require_running(self, control: str) -> None:
        """A control after the run ended would act on nothing (and write to a closed recording)."""
        if self._finishing or self._stopping:
            raise InputError(f"{control}: the run has ended; traffic controls no longer apply")

    async def pause(self) -> None:
        self._require_running("pause")
        await self.controls.pause()

    async def resume(self) -> None:
        self._require_running("resume")
        await self.controls.resume()

    async def set_rate(self, rate: float) -> None:
        self._require_running("set_rate")
        await self.controls.set_rate(rate)

    async def set_concurrency(self, concurrency: int) -> None:
        self._require_running("set_concurrency")
        await self.controls.set_concurrency(concurrency)

    async def relaunch(self, variant: str, changes: dict[str, Any]) -> None:
        """A new config epoch for ``variant`` (the app's relaunch and ``--change`` both come here)."""
        self._require_running("relaunch")
        await relaunch_variant(self, variant, changes)
