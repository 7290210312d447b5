"""One worker's engine in-process against the fake server: timing rules, live controls, draining.

Assertions are on the schedule's own (modelled) times and on orderings, not on how fast things ran.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.traffic.client import Target
from speclab.traffic.engine import TrafficEngine
from speclab.traffic.health import WorkerHealth
from speclab.traffic.schedule import Plan, build_plan

from .fake_server import FakeServer


def _plan(arrival: dict[str, Any], **top: Any) -> Plan:
    data: dict[str, Any] = {"name": "e", "seed": 3, "arrival": arrival,
                            "classes": {"qa": {"temperature": 0, "prompts": ["q"]}}}
    data.update(top)
    return build_plan(Scenario.model_validate(data))


async def _run(
    plan: Plan,
    targets: list[Target],
    control: Callable[[TrafficEngine], Awaitable[None]] | None = None,
    **kwargs: Any,
) -> tuple[TrafficEngine, list[RequestRecord], list[WorkerHealth]]:
    records: list[RequestRecord] = []
    health: list[WorkerHealth] = []

    def emit(message: tuple[str, Any]) -> None:
        if message[0] == "records":
            records.extend(message[1])
        elif message[0] == "health":
            health.append(message[1])

    engine = TrafficEngine(plan, targets, run_start=time.monotonic(), emit=emit, **kwargs)
    engine.begin(engine.now() + 0.05)
    runner = asyncio.ensure_future(engine.run())
    if control is not None:
        await control(engine)
    summary = await asyncio.wait_for(runner, 30)
    assert summary.finished == summary.started == len(records)
    return engine, records, health


def _target(server: FakeServer, variant: str, model: str) -> Target:
    return Target(variant, server.base_url, model)


async def test_open_loop_sends_every_request_to_every_variant_at_its_intended_time(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 50}, requests=20)
    targets = [_target(fake_server, "base", "ok:n=3"), _target(fake_server, "spec", "ok:n=3:per=2")]
    engine, records, _ = await _run(plan, targets)
    assert len(records) == 40 and all(r.ok for r in records)
    origin = engine._origin
    assert origin is not None
    planned = {r.request_id: origin + t for t, r in plan.offsets()}
    for rec in records:
        assert rec.intended == pytest.approx(planned[rec.request_id])
        assert rec.sent is not None and rec.sent >= rec.intended
    by_variant = {v: sorted(r.request_id for r in records if r.variant == v) for v in ("base", "spec")}
    assert by_variant["base"] == by_variant["spec"] == sorted(planned)


async def test_closed_loop_keeps_n_in_flight(fake_server: FakeServer) -> None:
    plan = _plan({"process": "concurrency", "concurrency": 3}, requests=12)
    _, records, _ = await _run(plan, [_target(fake_server, "v", "ok:n=4:itl=0.02")])
    assert len(records) == 12 and all(r.ok for r in records)
    # no slot sends before its intended time, not even the first ones at the run's start
    assert all(r.sent is not None and r.sent >= r.intended for r in records)
    assert fake_server.peak_in_flight == 3
    assert len(fake_server.peers) == 3  # keep-alive: each slot's connection is reused
    # a request's intended time is the moment its slot freed: never before the slot's previous request ended
    ends = sorted(r.done for r in records if r.done is not None)
    later = sorted(r.intended for r in records)[3:]
    for intended, freed in zip(later, ends, strict=False):
        assert intended >= freed - 1e-6


async def test_corrected_latency_exceeds_uncorrected_when_the_client_falls_behind(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 20}, duration_s=1.0)

    async def block(engine: TrafficEngine) -> None:
        await asyncio.sleep(0.3)
        time.sleep(0.4)  # a deliberately blocked event loop: the sends due meanwhile go out late

    _, records, health = await _run(plan, [_target(fake_server, "v", "ok:n=2")], block)
    late = [r for r in records if (r.schedule_lag or 0) > 0.05]
    assert len(late) >= 4
    for rec in late:
        assert rec.ttft_corrected is not None and rec.ttft is not None
        assert rec.ttft_corrected - rec.ttft == pytest.approx(rec.schedule_lag)
        assert rec.e2e_corrected > rec.e2e  # type: ignore[operator]
    assert any(h.saturated and "schedule lag" in h.reason for h in health)
    assert any(h.loop_lag_max_ms > 300 for h in health)


async def test_pause_shifts_the_rest_of_the_schedule(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 20}, duration_s=1.0)
    marks: dict[str, float] = {}

    async def pause(engine: TrafficEngine) -> None:
        await asyncio.sleep(0.3)
        marks["pause"] = engine.now()
        engine.pause(marks["pause"])
        await asyncio.sleep(0.4)
        marks["resume"] = engine.now()
        engine.resume(marks["resume"])

    _, records, _ = await _run(plan, [_target(fake_server, "v", "ok:n=2")], pause)
    assert len(records) == 20
    sent = [r.sent for r in records if r.sent is not None]
    assert not [t for t in sent if marks["pause"] + 0.01 < t < marks["resume"] - 0.01]
    intended = sorted(r.intended for r in records)
    gap = max(b - a for a, b in itertools.pairwise(intended))
    assert gap == pytest.approx(0.05 + (marks["resume"] - marks["pause"]), abs=0.002)


async def test_set_rate_retimes_remaining_requests(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 10}, duration_s=1.0)
    marks: dict[str, float] = {}

    async def faster(engine: TrafficEngine) -> None:
        await asyncio.sleep(0.45)
        marks["at"] = engine.now()
        engine.set_rate(40.0, marks["at"])

    _, records, _ = await _run(plan, [_target(fake_server, "v", "ok:n=2")], faster)
    intended = sorted(r.intended for r in records)
    after = [t for t in intended if t > marks["at"]]
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert gaps and all(g == pytest.approx(0.025) for g in gaps)
    assert len(records) > 20


async def test_set_concurrency_opens_slots(fake_server: FakeServer) -> None:
    plan = _plan({"process": "concurrency", "concurrency": 1}, duration_s=0.8)

    async def widen(engine: TrafficEngine) -> None:
        await asyncio.sleep(0.2)
        engine.set_concurrency(4)

    await _run(plan, [_target(fake_server, "v", "ok:n=4:itl=0.02")], widen)
    assert fake_server.peak_in_flight == 4


async def test_stop_drains_then_cancels_and_loses_no_record(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 20}, duration_s=10)
    targets = [_target(fake_server, "quick", "ok:n=2"), _target(fake_server, "slow", "ok:n=100:itl=0.05")]

    async def stop(engine: TrafficEngine) -> None:
        await asyncio.sleep(0.4)
        engine.stop(0.2)

    _, records, _ = await _run(plan, targets, stop)
    quick = [r for r in records if r.variant == "quick"]
    slow = [r for r in records if r.variant == "slow"]
    assert len(quick) == len(slow) >= 6
    assert all(r.ok for r in quick)
    assert all(r.error_kind == "cancelled" for r in slow)
    assert all(r.chunks for r in slow)  # partial streams are kept


async def test_sequential_runs_variants_one_after_another(fake_server: FakeServer) -> None:
    plan = _plan({"process": "constant", "rate": 50}, requests=5)
    targets = [_target(fake_server, "a", "ok:n=2"), _target(fake_server, "b", "ok:n=2")]
    _, records, _ = await _run(plan, targets, sequential=True)
    a = [r for r in records if r.variant == "a"]
    b = [r for r in records if r.variant == "b"]
    assert len(a) == len(b) == 5
    assert max(r.done for r in a if r.done) <= min(r.sent for r in b if r.sent)
    offsets_a = sorted(r.intended - min(x.intended for x in a) for r in a)
    offsets_b = sorted(r.intended - min(x.intended for x in b) for r in b)
    assert offsets_a == pytest.approx(offsets_b)


async def test_two_workers_split_closed_loop_slots_and_indices(fake_server: FakeServer) -> None:
    plan = _plan({"process": "concurrency", "concurrency": 3}, requests=10)
    records: list[RequestRecord] = []

    def emit(message: tuple[str, Any]) -> None:
        if message[0] == "records":
            records.extend(message[1])

    start = time.monotonic()
    engines = [TrafficEngine(plan, [_target(fake_server, "v", "ok:n=4:itl=0.02")], run_start=start, emit=emit,
                             worker=w, workers=2) for w in range(2)]
    for engine in engines:
        engine.begin(0.02)
    await asyncio.wait_for(asyncio.gather(*(e.run() for e in engines)), 30)
    assert sorted(int(r.request_id.rsplit("-", 1)[1]) for r in records) == list(range(10))
    assert {r.worker for r in records} == {0, 1}
    assert fake_server.peak_in_flight == 3  # 2 slots in worker 0, 1 in worker 1


async def test_set_target_sends_later_requests_to_the_new_epoch_with_its_k_endpoint_and_headers(
    fake_server: FakeServer,
) -> None:
    relaunched = await FakeServer().start()
    try:
        plan = _plan({"process": "constant", "rate": 40}, requests=24)
        old = Target("k4", fake_server.base_url, "ok:n=9:per=3", headers={"X-Which": "old"}, num_spec_tokens=2)
        new = Target("k4", relaunched.base_url, "ok:n=9:per=7", headers={"X-Which": "new"}, num_spec_tokens=6,
                     epoch=2)

        async def control(engine: TrafficEngine) -> None:
            while len(fake_server.seen) < 8:
                await asyncio.sleep(0.01)
            engine.set_target(new)
            with pytest.raises(ValueError, match="no variant 'k9'"):
                engine.set_target(Target("k9", relaunched.base_url, "ok"))

        _, records, _ = await _run(plan, [old], control)
    finally:
        await relaunched.stop()
    before = [r for r in records if r.epoch == 1]
    after = [r for r in records if r.epoch == 2]
    assert len(before) >= 8 and after and len(before) + len(after) == 24
    assert {s.request_id for s in relaunched.seen} == {r.request_id for r in after}
    assert all(s.headers.get("X-Which") == "new" for s in relaunched.seen)
    assert all(s.headers.get("X-Which") == "old" for s in fake_server.seen)
    # Estimated counts use the new epoch's k: histograms of k+1 bins.
    assert {len(r.spec.histogram) for r in before} == {3} and {len(r.spec.histogram) for r in after} == {7}
    assert max(r.sent or 0.0 for r in before) <= min(r.sent or 0.0 for r in after)
