"""The merge, with identical input on both paths: what two local worker processes shipped to
their parent, sent again through two Ray actors on two nodes and Ray's object store, gives the
coordinator the same records, the same accounting and, bit for bit, the same HDR histograms."""

from __future__ import annotations

import time
from typing import Any

import pytest

from speclab.metrics.aggregator import Aggregator
from speclab.model.records import RequestRecord
from speclab.traffic import Target, TrafficRunner, build_plan
from speclab.traffic.cluster.runner import RayTrafficRunner

from ..traffic.fake_server import FakeServer
from .ray_nodes import RayCluster, free_cpus
from .test_ray_runner import _scenario

# The first test to use the cluster also pays for starting it (about a minute on a loaded 2-core host).
pytestmark = pytest.mark.timeout(300)

VARIANTS, CLASSES = ("base", "spec"), ("qa",)


class StreamKeeper(TrafficRunner):
    """The local runner, keeping every message each worker shipped, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streams: dict[int, list[tuple[str, Any]]] = {}

    def _handle(self, w: int, message: tuple[str, Any]) -> None:
        self.streams.setdefault(w, []).append(message)
        super()._handle(w, message)


def _aggregator() -> Aggregator:
    return Aggregator(VARIANTS, CLASSES, interval_s=1.0, simulated=False, warmup_s=0.0)


def _histograms(aggregator: Aggregator, end: float) -> dict[tuple[int, str], tuple[int, list[int]]]:
    aggregator.finish(end)
    out = {}
    for index, _start, _end, tag, encoded in aggregator.iter_closed_intervals():
        hist = encoded.decode()
        out[(index, tag)] = (hist.count, hist.counts().tolist())
    return out


async def test_worker_streams_merge_identically_through_ray(ray_cluster: RayCluster, fake_server: FakeServer) -> None:
    plan = build_plan(_scenario(requests=60, arrival={"process": "poisson", "rate": 40}))
    targets = {v: Target(v, fake_server.base_url, "ok:n=8:per=2:ttft=0.01:itl=0.003") for v in VARIANTS}
    run_start = time.monotonic()
    local_records: list[RequestRecord] = []
    local_agg = _aggregator()

    def local_sink(records: list[RequestRecord]) -> None:
        local_records.extend(records)
        local_agg.add_records(records)

    local = StreamKeeper(plan, targets, workers=2, run_start=run_start, on_records=local_sink)
    await local.start()
    local_summary = await local.finished
    assert local_summary.errors == [] and local_summary.records == 120

    ray_records: list[RequestRecord] = []
    ray_agg = _aggregator()

    def ray_sink(records: list[RequestRecord]) -> None:
        ray_records.extend(records)
        ray_agg.add_records(records)

    remote = RayTrafficRunner(plan, targets, cluster=ray_cluster.address, workers=2, run_start=run_start,
                              on_records=ray_sink)
    await remote.open()
    assert len({remote.nodes[w]["node_id"] for w in (0, 1)}) == 2
    for w, actor in enumerate(remote.actors):
        await actor.relay.remote(local.streams[w], True)
    remote.follow()
    ray_summary = await remote.finished
    assert free_cpus(2) == 2  # a finished run has given the cluster back

    assert ray_summary.errors == []
    assert (ray_summary.records, ray_summary.started, ray_summary.issued) == (
        local_summary.records, local_summary.started, local_summary.issued)
    assert sorted(ray_records, key=lambda r: (r.variant, r.request_id)) == sorted(
        local_records, key=lambda r: (r.variant, r.request_id))
    end = max(r.done or r.sent or 0.0 for r in local_records) + 2.0
    local_hists, ray_hists = _histograms(local_agg, end), _histograms(ray_agg, end)
    assert local_hists and sum(count for count, _ in local_hists.values()) > 0
    assert ray_hists == local_hists
    local_snap, ray_snap = local_agg.snapshot(end, finished=True), ray_agg.snapshot(end, finished=True)
    assert ray_snap.cumulative == local_snap.cumulative
