"""accept keeps nothing per request: a load stage's records stream to its gates' accumulators.

Drives the canary stage's whole intake (``measure``: the aggregator, the recording, the context's
answered counts and spool, the canary gate's tally) with 200 requests per second of run clock per
variant from a stand-in traffic runner that hands over batches as the workers do, and measures with
tracemalloc what stays allocated between a warmed-up point and 6,000 requests later. The gate then
judges the stream as it would have judged the list.
"""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from speclab.gates.golden import load_golden
from speclab.model.gates import load_gates
from speclab.model.lab import load_lab
from speclab.model.records import RequestRecord, SpecCounts
from speclab.model.scenario import load_scenario
from speclab.servers.engine import select_engine
from speclab.session import accept_load
from speclab.session.accept import GOLDEN_DIR
from speclab.session.accept_context import AcceptContext
from speclab.traffic.runner import TrafficSummary

RATE = 200  # per variant
WARM_S, MEASURED_S = 10, 10
BYTES_PER_REQUEST = 150


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _Runner:
    """Hands ``on_records`` the batches a worker would ship every 0.1 s, advancing the clock."""

    def __init__(self, clock: _Clock, run_start: float, variants: tuple[str, ...], classes: list[str],
                 on_records: Callable[[list[RequestRecord]], None]) -> None:
        self.clock, self.run_start, self.variants, self.classes = clock, run_start, variants, classes
        self.on_records = on_records
        self.grown: list[float] = []
        self.finished: asyncio.Future[TrafficSummary] = asyncio.get_running_loop().create_future()

    def _drive(self, seconds: int, rng: random.Random) -> int:
        n = 0
        for _ in range(seconds * 10):
            self.clock.t += 0.1
            batch = []
            for i in range(RATE // 10):
                for variant in self.variants:
                    done = self.clock.t - self.run_start - rng.uniform(0.0, 0.1)
                    hist = [rng.randrange(4) for _ in range(3)]
                    batch.append(RequestRecord(
                        request_id=f"{variant}-{self.clock.t:.1f}-{i}", variant=variant, prompt_class=self.classes[i % len(self.classes)],
                        intended=done - 0.7, sent=done - 0.7, first_token=done - 0.6, last_token=done - 0.01, done=done,
                        chunks=64, token_reads=60, output_tokens=64, output_text=" the sea" * 32,
                        spec=SpecCounts(sum(hist), 3 * sum(hist), sum(j * c for j, c in enumerate(hist)), hist, 3, "exact")
                        if variant != "baseline" else SpecCounts()))
            self.on_records(batch)
            n += len(batch)
        return n

    async def start(self) -> None:
        rng = random.Random(3)
        self._drive(WARM_S, rng)  # warm: histograms pooled, the first intervals closed
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        n = self._drive(MEASURED_S, rng)
        gc.collect()
        self.grown.append((tracemalloc.get_traced_memory()[0] - before) / n)
        tracemalloc.stop()
        self.clock.t += 6.0  # the stage's aggregator closes its last intervals
        self.finished.set_result(TrafficSummary(workers=1))

    async def stop(self, timeout: float) -> TrafficSummary:
        return await self.finished


async def test_the_canary_stage_keeps_almost_nothing_per_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = load_lab("default")
    canary = load_scenario("mixed")
    clock = _Clock()
    ctx = AcceptContext(lab=lab, profile=load_gates(None).profile("quick"), engine=select_engine("sim"), seed=0,
                        force=False, golden_cases=load_golden(GOLDEN_DIR), canary_scenario=canary,
                        record_path=tmp_path / "rec", clock=clock)
    runners: list[_Runner] = []

    def make_runner(plan: Any, targets: Any, *, run_start: float, on_records: Callable[[list[RequestRecord]], None],
                    **_: Any) -> _Runner:
        runners.append(_Runner(clock, run_start, ctx.variants, [c.name for c in plan.classes], on_records))
        return runners[0]

    monkeypatch.setattr(accept_load, "make_runner", make_runner)
    ctx.begin_stage()
    result, snap = await accept_load.canary_stage(ctx)
    sent = RATE * (WARM_S + MEASURED_S) * len(ctx.variants)
    assert ctx.requests_sent == sent == ctx.stage_answers.total == ctx.spool.count
    assert sum(1 for _ in ctx.spool.records()) == sent
    assert snap.cumulative["k4"].total.requests == RATE * (WARM_S + MEASURED_S)
    assert any(line.removeprefix("FAIL ").startswith("k4 all: rejection rate") for line in result.details)
    grown = runners[0].grown[0]
    assert grown < BYTES_PER_REQUEST, f"{grown:.0f} bytes kept per request"
    ctx.spool.close()
