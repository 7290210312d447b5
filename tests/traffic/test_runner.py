"""The parent-side facade with real worker processes (spawn) against the fake server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from speclab.model.errors import InputError
from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.traffic import Target, TrafficRunner, WorkerHealth, build_plan

from .fake_server import FakeServer


def _scenario(**top: Any) -> Scenario:
    data: dict[str, Any] = {"name": "r", "seed": 2, "arrival": {"process": "constant", "rate": 20},
                            "classes": {"qa": {"temperature": 0.5, "prompts": ["q1", "q2"]}}}
    data.update(top)
    return Scenario.model_validate(data)


async def test_two_workers_partition_the_plan_and_ship_records(fake_server: FakeServer) -> None:
    plan = build_plan(_scenario(requests=16))
    targets = {v: Target(v, fake_server.base_url, "ok:n=3") for v in ("base", "spec")}
    runner = TrafficRunner(plan, targets, workers=2, run_start=time.monotonic())
    await runner.start()
    items: list[Any] = [item async for item in runner]
    summary = await runner.finished
    records = [r for item in items if isinstance(item, list) for r in item]
    health = [item for item in items if isinstance(item, WorkerHealth)]
    assert summary.errors == []
    assert summary.records == len(records) == 32 and summary.started == 32
    assert all(isinstance(r, RequestRecord) and r.ok for r in records)
    assert {r.worker for r in records} == {0, 1}
    for variant in targets:
        ids = sorted(r.request_id for r in records if r.variant == variant)
        assert ids == sorted(req.request_id for _, req in plan.offsets())
    assert runner.traffic_start is not None
    planned = {req.request_id: runner.traffic_start + t for t, req in plan.offsets()}
    assert all(abs(r.intended - planned[r.request_id]) < 1e-9 for r in records)
    assert all(r.sent is not None and r.sent >= r.intended for r in records)  # uvloop timers fire early
    assert {h.worker for h in health} == {0, 1}


async def test_live_controls_and_stop_with_callbacks(fake_server: FakeServer) -> None:
    records: list[RequestRecord] = []
    health: list[WorkerHealth] = []
    targets = {"v": Target("v", fake_server.base_url, "ok:n=60:itl=0.05")}
    runner = TrafficRunner(_scenario(duration_s=30), targets, run_start=time.monotonic(),
                           on_records=records.extend, on_health=health.append)
    await runner.start()
    await asyncio.sleep(0.3)
    await runner.pause()
    paused_at = runner.now()
    await asyncio.sleep(0.3)
    await runner.resume()
    resumed_at = runner.now()
    await runner.set_rate(40.0)
    await asyncio.sleep(0.3)
    summary = await runner.stop(drain_timeout=0.2)
    assert summary.errors == [] and summary.stopped_early
    assert summary.records == len(records) == summary.started
    assert records and all(r.error_kind == "cancelled" for r in records)  # 3 s streams cut by the stop
    sent = [r.sent for r in records if r.sent is not None]
    assert not [t for t in sent if paused_at + 0.02 < t < resumed_at - 0.02]
    assert runner.finished.done()


async def test_controls_that_do_not_fit_the_plan_are_input_errors() -> None:
    closed = _scenario(requests=4, arrival={"process": "concurrency", "concurrency": 2})
    runner = TrafficRunner(closed, {"v": Target("v", "http://127.0.0.1:9", "m")}, run_start=time.monotonic())
    with pytest.raises(InputError, match="closed loop"):
        await runner.set_rate(5.0)
    with pytest.raises(InputError, match="at least 1"):
        await runner.set_concurrency(0)
    summary = await runner.stop(drain_timeout=0.1)  # never started: ends at once
    assert summary.started == 0 and runner.finished.done()
    with pytest.raises(InputError, match="no targets"):
        TrafficRunner(closed, {}, run_start=0.0)
