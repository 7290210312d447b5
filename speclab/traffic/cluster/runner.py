"""``RayTrafficRunner``: the traffic runner with its workers as Ray actors across a cluster.

The coordinator (this process) keeps everything a local runner keeps (the plan, the common start,
the phases, the accounting of requests begun) and changes only where the workers live: one actor
per CPU bundle of a SPREAD placement group, each given the same ``WorkerConfig`` (its slice of the
plan, absolute intended times on the coordinator's clock) and a clock offset measured by
``clock.estimate`` before the start and again every few seconds. Each worker's messages come back
through ``TrafficActor.pull`` and enter the same handler as a local worker's; a health report
gains the worker's node and clock bound on the way. An actor that dies ends like a dead process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from speclab.model import limits as L
from speclab.model.errors import InputError
from speclab.model.limits import check_option

from ..runner import READY_TIMEOUT_S, TrafficRunner
from ..worker import WorkerConfig
from .actor import TrafficActor
from .clock import PROBES, ClockOffset, Probe, annotate, discipline, estimate

START_DELAY_S = 0.5  # a control message crosses the cluster in milliseconds; the start waits longer
PULL_WAIT_S = 0.5
CLOCK_RESYNC_S = 2.0
PLACEMENT_TIMEOUT_S = 60.0
PLACEMENT_POLL_S = 2
CONNECT_ATTEMPTS = 3


class RayTrafficRunner(TrafficRunner):
    """``workers=None`` places one worker per CPU the cluster has."""

    def __init__(self, *args: Any, cluster: str, workers: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, workers=workers or 1, **kwargs)
        self.cluster = cluster
        self._auto_workers = workers is None
        self._ray: Any = None
        self._pg: Any = None
        self.nodes: dict[int, dict[str, Any]] = {}  # worker -> where it runs (TrafficActor.describe)
        self.clocks: dict[int, ClockOffset] = {}  # worker -> its clock's offset and error bound
        self._applied: dict[int, float] = {}  # worker -> the offset it runs on
        self._pullers: dict[int, asyncio.Task[None]] = {}
        self._closing: set[int] = set()  # workers no longer listened to (their pull ends by itself)
        self._deaths: dict[int, str] = {}
        self._clock_task: asyncio.Task[None] | None = None

    @property
    def actors(self) -> list[Any]:
        """The placed workers' actor handles, in worker order."""
        return list(self._procs)

    def node_label(self, w: int) -> str:
        node = self.nodes.get(w) or {}
        return f"{node.get('ip', '?')}/{str(node.get('node_id', '?'))[:8]}"

    async def open(self) -> None:
        """Connect, place the workers and set their clocks; nothing is sent yet."""
        loop = asyncio.get_running_loop()
        _ = self.finished
        self._ray = await loop.run_in_executor(None, connect, self.cluster)
        try:
            await self._place_workers()
            await asyncio.gather(*(self._sync_clock(w) for w in range(self.workers)))
        except BaseException:
            await self._abort()
            raise

    def follow(self) -> None:
        """Take every placed worker's messages from here on."""
        loop = asyncio.get_running_loop()
        for w in range(len(self._procs)):
            self._alive.add(w)
            self._pullers[w] = loop.create_task(self._pull_loop(w), name=f"speclab-ray-pull-{w}")

    async def start(self) -> None:
        await self.open()
        try:
            targets = list(self.targets.values())
            for w, actor in enumerate(self._procs):
                config = WorkerConfig(
                    plan=self.plan, targets=targets, worker=w, workers=self.workers, sequential=self.sequential,
                    run_start=self.run_start, batch_size=self._batch_size, connector_limit=self._connector_limit,
                    health_interval_s=self._health_interval_s,
                )
                await actor.start.remote(config)
            self.follow()
            await asyncio.wait_for(self._ready_event.wait(), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self._abort()
            raise InputError(f"--cluster {self.cluster}: traffic workers did not start within {READY_TIMEOUT_S:g} s") from None
        except BaseException:
            await self._abort()
            raise
        if len(self._alive) < self.workers:
            errors = "; ".join(self._summary.errors)
            await self._abort()
            raise InputError(f"--cluster {self.cluster}: traffic workers failed to start: {errors}")
        self.traffic_start = self.now() + START_DELAY_S
        self._summary.traffic_start = self.traffic_start
        self._broadcast(("begin", self.traffic_start))
        self._clock_task = asyncio.get_running_loop().create_task(self._clock_loop(), name="speclab-ray-clock")

    async def _place_workers(self) -> None:
        ray = self._ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cpus = int(ray.cluster_resources().get("CPU", 0))
        if self._auto_workers:
            self.workers = max(1, cpus)
        check_option("--workers", self.workers, 1, L.MAX_WORKERS)
        self._summary.workers = self.workers
        addresses = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in ray.nodes() if n.get("Alive")}
        check_reachable(self.targets.values(), list(addresses.values()))
        # A name of this run's own: two runs on one cluster (two users, or a run whose predecessor's
        # group Ray is still removing) must not collide on it.
        name = f"speclab-traffic-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        loop = asyncio.get_running_loop()
        bundles = [{"CPU": 1}] * self.workers
        try:
            self._pg = await loop.run_in_executor(None, lambda: placement_group(bundles, strategy="SPREAD", name=name))
        except Exception as error:  # Ray's own refusal, raised through the client
            raise InputError(f"--cluster {self.cluster}: cannot place {self.workers} traffic workers: "
                             f"{_first_line(error)}") from None
        if not await self._placed(self._pg):
            held = await loop.run_in_executor(None, _held_by, ray, name)
            raise InputError(f"--cluster {self.cluster}: no room for {self.workers} traffic workers of one CPU each "
                             f"within {PLACEMENT_TIMEOUT_S:g} s (the cluster has {cpus} CPUs; {held})")
        remote = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(TrafficActor)
        for w in range(self.workers):
            strategy = PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=w)
            self._procs.append(remote.options(scheduling_strategy=strategy, name=None).remote())
        described = await asyncio.gather(*(actor.describe.remote() for actor in self._procs))
        self.nodes = {w: {**d, "ip": addresses.get(d["node_id"], "?")} for w, d in enumerate(described)}

    @staticmethod
    async def _placed(pg: Any) -> bool:
        """Whether the group is placed within ``PLACEMENT_TIMEOUT_S``. ``PlacementGroup.wait`` asks
        the GCS, as Ray Train does; ``ready()`` also runs a task in one of the bundles, so it waits
        for a worker process to start there as well. The wait is made in calls of a few whole
        seconds (Ray takes whole seconds) so that Ctrl-C is not held up by a long one."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + PLACEMENT_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            if await loop.run_in_executor(None, pg.wait, min(PLACEMENT_POLL_S, math.ceil(left))):
                return True
        return False

    # ---- clocks ----------------------------------------------------------------------------

    async def _probe(self, w: int) -> ClockOffset:
        actor, probes = self._procs[w], []
        for _ in range(PROBES):
            sent = time.monotonic()
            remote = await actor.clock.remote()
            probes.append(Probe(sent, remote, time.monotonic()))
        return estimate(probes)

    async def _sync_clock(self, w: int) -> None:
        measured = await self._probe(w)
        applied = discipline(self._applied.get(w), measured)
        if applied != self._applied.get(w):
            await self._procs[w].set_offset.remote(applied)
            self._applied[w] = applied
        # The worker's clock is off by its applied offset's distance from the truth, at most this:
        self.clocks[w] = ClockOffset(measured.offset, abs(applied - measured.offset) + measured.bound)

    async def _clock_loop(self) -> None:
        while self._alive:
            await asyncio.sleep(CLOCK_RESYNC_S)
            alive = sorted(self._alive)
            await asyncio.gather(*(self._sync_clock(w) for w in alive), return_exceptions=True)

    # ---- plumbing --------------------------------------------------------------------------

    def _broadcast(self, message: tuple[Any, ...]) -> None:
        for w in sorted(self._alive):
            self._procs[w].control.remote(message)

    async def _pull_loop(self, w: int) -> None:
        actor = self._procs[w]
        try:
            while w not in self._closing:  # never cancelled: Ray Client mishandles a cancelled call
                batch, ended = await actor.pull.remote(PULL_WAIT_S)
                for kind, payload in batch:
                    if kind == "health":
                        payload = annotate(payload, self.node_label(w), self.clocks.get(w))
                    self._handle(w, (kind, payload))
                if ended:
                    break
        except Exception as error:  # RayActorError and kin: the actor or its node is gone
            if w not in self._closing:
                self._deaths[w] = (f"the Ray actor on node {self.node_label(w)} died: "
                                   f"{type(error).__name__}: {_first_line(error)}")
        if w in self._alive:
            self._worker_ended(w)

    def _close_channel(self, w: int) -> None:
        self._closing.add(w)

    async def _reap(self, w: int) -> str:
        return self._deaths.get(w, f"on node {self.node_label(w)}")

    async def _finish(self) -> None:
        if self._clock_task is not None:
            self._clock_task.cancel()
        # The cluster is given back before ``finished`` resolves: whoever awaited it (the next cell
        # of a sweep, the next stage of accept) finds the CPUs free again.
        await asyncio.get_running_loop().run_in_executor(None, self._release)
        await super()._finish()

    async def _kill_all(self) -> None:
        for actor in self._procs:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        for w in list(self._alive):
            self._worker_ended(w)
        if not self._alive and self._finishing is None:
            await asyncio.get_running_loop().run_in_executor(None, self._release)
            if not self.finished.done():
                self.finished.set_result(self._summary)

    async def _abort(self) -> None:
        """A start that failed: kill what was placed and wait until the cluster is given back."""
        await self._kill_all()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.finished), 15.0)
        await asyncio.get_running_loop().run_in_executor(None, self._release)

    def _release(self) -> None:
        """Give the cluster back: the workers and their placement group. The connection stays
        for the next run of this process (a sweep's cells, accept's stages); Ray closes it at exit."""
        ray, self._ray = self._ray, None
        if ray is None:
            return
        for actor in self._procs:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if self._pg is not None:
            with contextlib.suppress(Exception):
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._pg)
            self._pg = None


_connected: list[str] = []  # the cluster this process is connected to


def connect(cluster: str) -> Any:
    """``ray.init`` on the named cluster (``ray://HOST:PORT`` through Ray Client, or ``auto``),
    once per process: later runs reuse the connection."""
    import ray

    if ray.is_initialized():
        if _connected == [cluster]:
            return ray
        ray.shutdown()
    _connected.clear()
    for attempt in range(CONNECT_ATTEMPTS):
        try:
            ray.init(address=cluster, logging_level=logging.WARNING, log_to_driver=False, namespace="speclab",
                     configure_logging=False)
            _connected.append(cluster)
            return ray
        except ConnectionError as error:  # the head may still be starting its client server
            if attempt + 1 == CONNECT_ATTEMPTS:
                raise InputError(f"--cluster {cluster}: cannot connect: {_first_line(error)}") from None
        except Exception as error:
            raise InputError(f"--cluster {cluster}: cannot connect: {_first_line(error)}") from None
    return ray


def _held_by(ray: Any, own: str) -> str:
    """Where a cluster's CPUs went, for the line that says a run found no room: how many are free
    and which other placement groups hold some."""
    try:
        free = float(ray.available_resources().get("CPU", 0.0))
        from ray.util.placement_group import placement_group_table

        table = placement_group_table()
    except Exception as error:  # the cluster that did not place the workers may not answer this either
        return f"it did not say what is free: {_first_line(error)}"
    return room_line(free, table, own)


def room_line(free: float, table: dict[str, dict[str, Any]], own: str) -> str:
    """``_held_by``'s words from the free CPUs and Ray's placement group table."""
    others = sorted(str(pg.get("name") or pg_id) for pg_id, pg in table.items()
                    if pg.get("state") == "CREATED" and pg.get("name") != own)
    if not others:
        return f"{free:g} free, held by no other placement group: the cluster did not schedule the workers in time"
    return f"{free:g} free; placement groups holding CPUs: {', '.join(others[:5])}"


def check_reachable(targets: Any, node_ips: list[str]) -> None:
    """A loopback target (a server speclab started on this host) reaches workers on this host
    only; with a node elsewhere, say so before any request goes astray."""
    local = _local_addresses()
    remote = sorted({ip for ip in node_ips if ip and ip not in local})
    if not remote:
        return
    for target in targets:
        host = urlsplit(target.base_url).hostname or ""
        with contextlib.suppress(ValueError):
            if host == "localhost" or ipaddress.ip_address(host).is_loopback:
                raise InputError(f"--cluster: {target.variant} is served at {target.base_url}, which workers on "
                                 f"{', '.join(remote)} cannot reach; --attach a URL the cluster can reach")


def _local_addresses() -> set[str]:
    import psutil

    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs} | {"127.0.0.1"}


def _first_line(error: BaseException) -> str:
    """The error on one line (Ray's messages run over several; the first two say what happened).
    A task's error (``RayTaskError``) says first where it ran: its cause says what happened."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and cause is not error:
        return _first_line(cause)
    text = " ".join(line.strip() for line in str(error).strip().splitlines()[:2] if line.strip())
    return text[:300] or type(error).__name__
