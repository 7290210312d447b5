"""The engine loop's clock: real time follows modelled time, and a slow host shows up as drift."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig, StepResult
from speclab.sim.engine_client import InProcessClient
from speclab.sim.prom import SimMetrics
from speclab.sim.serve_loop import EngineLoop

from .fake_engine import FakeEngine


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0)  # one turn of the loop, not a guess at how long


def _metrics() -> SimMetrics:
    return SimMetrics("m", num_spec_tokens=2, max_model_len=4096, cache_info={"block_size": "16"})


class SlowHostEngine(FakeEngine):
    """Each step costs the host three times its modelled duration (a virtual clock jump)."""

    def __init__(self, config: EngineConfig, offset: list[float]) -> None:
        super().__init__(config)
        self.offset = offset
        self.modelled = 0.0

    def step(self, now: float) -> StepResult:
        result = super().step(now)
        self.modelled += result.duration
        self.offset[0] += 3 * result.duration
        return result


async def test_overloaded_host_shows_as_drift_and_queue_times_stay_causal() -> None:
    offset = [0.0]
    engine = SlowHostEngine(EngineConfig(model="sim-8b", speculative=SpecConfig("ngram", 2)), offset)
    loop = EngineLoop(InProcessClient(engine), _metrics(), clock=lambda: time.monotonic() + offset[0])
    task = asyncio.create_task(loop.run())
    streams = [await loop.submit(f"r{i}", [5, 6, 7], SamplingParams(max_tokens=12, seed=i)) for i in range(3)]
    finals = []
    for s in streams:
        while True:
            d = await s.queue.get()
            assert d.output is not None
            if d.output.finished:
                finals.append(d.output)
                break
    assert loop.max_drift >= 2 * engine.modelled * 0.99
    for out in finals:
        assert out.times is not None and out.times.scheduled is not None
        assert out.times.scheduled >= out.times.queued
    loop.stop()
    await task


async def test_idle_clock_catches_up_and_drift_resets() -> None:
    offset = [0.0]
    metrics = _metrics()
    loop = EngineLoop(InProcessClient(FakeEngine(EngineConfig(model="sim-1b"))), metrics,
                      clock=lambda: time.monotonic() + offset[0])
    task = asyncio.create_task(loop.run())
    offset[0] += 100.0  # a long idle stretch
    s = await loop.submit("a", [1, 2], SamplingParams(max_tokens=3))
    assert s.arrival >= 100.0
    while not (await s.queue.get()).output.finished:  # type: ignore[union-attr]
        pass
    await asyncio.wait_for(_until(lambda: loop.drift == 0.0), 10)  # the loop went idle: drift reset
    assert metrics.registry.get_sample_value("speclab_sim_clock_drift_seconds") == 0.0
    loop.stop()
    await task


class PreemptedOnceEngine(FakeEngine):
    """Every output carries the request's cumulative preemption count, as the real engine's do."""

    def step(self, now: float) -> StepResult:
        result = super().step(now)
        for out in result.outputs:
            out.num_preemptions = 1
        return result


async def test_preemptions_per_request_are_counted_once() -> None:
    metrics = _metrics()
    loop = EngineLoop(InProcessClient(PreemptedOnceEngine(EngineConfig(model="sim-1b"))), metrics)
    task = asyncio.create_task(loop.run())
    s = await loop.submit("a", [1, 2], SamplingParams(max_tokens=6))
    outputs = 0
    while True:
        d = await s.queue.get()
        assert d.output is not None
        outputs += 1
        if d.output.finished:
            break
    assert outputs == 6
    assert metrics.registry.get_sample_value("vllm:request_num_preemptions_count", {"model_name": "m", "engine": "0"}) == 1
    assert metrics.registry.get_sample_value("vllm:request_num_preemptions_sum", {"model_name": "m", "engine": "0"}) == 1
    loop.stop()
    await task
