"""``--sim-time-scale S``: the modelled clock runs S times slower; every reported figure stays modelled."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from speclab.sim.api import EngineConfig, SamplingParams
from speclab.sim.cli import parse_args
from speclab.sim.engine_client import InProcessClient
from speclab.sim.prom import SimMetrics
from speclab.sim.serve_loop import EngineLoop

from .conftest import start_sim
from .fake_engine import FakeEngine


def test_the_flag_takes_numbers_from_1_and_refuses_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["sim-8b"]).time_scale == 1.0
    assert parse_args(["sim-8b", "--sim-time-scale", "2.5"]).time_scale == 2.5
    for bad in ("0.5", "-1", "inf", "slow"):
        with pytest.raises(SystemExit) as info:
            parse_args(["sim-8b", "--sim-time-scale", bad])
        assert info.value.code == 2
        assert "--sim-time-scale" in capsys.readouterr().err


async def test_the_loop_counts_wall_time_divided_by_s_and_sleeps_s_times_longer() -> None:
    wall = [1000.0]
    metrics = SimMetrics("m", num_spec_tokens=None, max_model_len=4096, cache_info={"block_size": "16"}, time_scale=4.0)
    loop = EngineLoop(InProcessClient(FakeEngine(EngineConfig(model="sim-1b"))), metrics,
                      clock=lambda: wall[0], time_scale=4.0)
    wall[0] += 8.0  # eight wall seconds are two modelled ones
    assert loop.real() == pytest.approx(2.0)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)
        wall[0] += delay
        await real_sleep(0)

    task = asyncio.create_task(loop.run())
    stream = await loop.submit("a", [1, 2, 3], SamplingParams(max_tokens=4))
    asyncio.sleep = fake_sleep  # type: ignore[assignment]
    try:
        while True:
            d = await asyncio.wait_for(stream.queue.get(), 5)
            if d.output is not None and d.output.finished:
                break
    finally:
        asyncio.sleep = real_sleep  # type: ignore[assignment]
    modelled = metrics.registry.get_sample_value("speclab_sim_step_seconds_total") or 0.0
    assert modelled > 0 and sum(d for d in slept if d > 0) == pytest.approx(4.0 * modelled, rel=0.05)
    assert stream.last_at is not None and stream.last_at - stream.arrival == pytest.approx(modelled, rel=0.05)
    assert metrics.registry.get_sample_value("speclab_sim_time_scale") == 4.0
    assert loop.max_drift == pytest.approx(0.0, abs=1e-9)
    loop.stop()
    await task


def test_a_scaled_server_says_its_scale_on_version_and_metrics(tmp_path: Path) -> None:
    proc = start_sim(["sim-1b", "--sim-time-scale", "3"], tmp_path, "scaled")
    try:
        with urllib.request.urlopen(proc.url + "/version", timeout=5) as r:
            version = json.loads(r.read())
        assert version["sim_time_scale"] == 3.0 and version["simulated"] is True
        body = json.dumps({"model": "sim-1b", "prompt": "Hello there", "max_tokens": 8, "temperature": 0})
        req = urllib.request.Request(proc.url + "/v1/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 8
        wall = time.monotonic() - t0
        with urllib.request.urlopen(proc.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("speclab_sim_") and not line.startswith("#")}
        assert values["speclab_sim_time_scale"] == 3.0
        assert values["speclab_sim_steps_total"] >= 8
        assert wall >= 3.0 * values["speclab_sim_step_seconds_total"] * 0.95  # it really waited S times longer
        assert "time scale 3" in proc.log()
    finally:
        proc.stop()
