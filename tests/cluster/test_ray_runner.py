"""RayTrafficRunner on a real two-node cluster against the fake server: the plan partitioned
across nodes, every request accounted for, health per worker and node, a dead actor reported."""

from __future__ import annotations

import time
from typing import Any

import pytest

from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.traffic import Target, WorkerHealth, build_plan
from speclab.traffic.cluster import make_runner
from speclab.traffic.cluster.runner import RayTrafficRunner

from ..traffic.fake_server import FakeServer
from .ray_nodes import RayCluster, free_cpus

# The first test to use the cluster also pays for starting it (about a minute on a loaded 2-core host).
pytestmark = pytest.mark.timeout(300)


def _scenario(**top: Any) -> Scenario:
    data: dict[str, Any] = {"name": "r", "seed": 2, "arrival": {"process": "constant", "rate": 20},
                            "classes": {"qa": {"temperature": 0.5, "prompts": ["q1", "q2"]}}}
    data.update(top)
    return Scenario.model_validate(data)


async def test_one_worker_per_cluster_cpu_across_both_nodes(ray_cluster: RayCluster, fake_server: FakeServer) -> None:
    plan = build_plan(_scenario(requests=16))
    targets = {v: Target(v, fake_server.base_url, "ok:n=3") for v in ("base", "spec")}
    runner = make_runner(plan, targets, cluster=ray_cluster.address, workers=None, run_start=time.monotonic())
    assert isinstance(runner, RayTrafficRunner)
    await runner.start()
    items: list[Any] = [item async for item in runner]
    summary = await runner.finished
    records = [r for item in items if isinstance(item, list) for r in item]
    health = [item for item in items if isinstance(item, WorkerHealth)]
    assert summary.errors == [] and summary.workers == 2
    assert summary.records == len(records) == 32 and summary.started == 32
    assert all(isinstance(r, RequestRecord) and r.ok for r in records)
    assert {r.worker for r in records} == {0, 1}
    for variant in targets:
        assert sorted(r.request_id for r in records if r.variant == variant) == sorted(
            req.request_id for _, req in plan.offsets())
    assert runner.traffic_start is not None
    planned = {req.request_id: runner.traffic_start + t for t, req in plan.offsets()}
    assert all(abs(r.intended - planned[r.request_id]) < 1e-9 for r in records)
    assert len({n["node_id"] for n in runner.nodes.values()}) == 2  # SPREAD: one worker on each node
    assert {h.node for h in health} == {runner.node_label(0), runner.node_label(1)}
    assert all(h.clock_bound_ms > 0 for h in health)
    assert free_cpus(2) == 2  # a finished run has given the cluster back

