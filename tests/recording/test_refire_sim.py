"""Refire the shipped sample recording at a fresh simulator: greedy outputs come back token for token."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from speclab.model.paths import resolve
from speclab.model.records import RequestRecord
from speclab.recording import Recording
from speclab.recording.compare import compare_outputs
from speclab.recording.refire import refire_traffic_plan
from speclab.servers.process import free_port
from speclab.traffic.client import Target
from speclab.traffic.runner import TrafficRunner

VARIANT = "k2"


def _recorded_argv(recording: Recording, variant: str, port: int) -> list[str]:
    argv = shlex.split(recording.manifest["servers"][variant]["command"])
    at = argv.index("-m")
    argv = [sys.executable, *argv[at:]]
    argv[argv.index("--port") + 1] = str(port)
    return argv


async def _ready(url: str, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 90  # generous: a loaded host starts it slowly
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "simulator exited during start-up"
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("simulator never became ready")


@pytest.mark.slow
async def test_refire_sample_at_simulator_reproduces_greedy_outputs(tmp_path: Path) -> None:
    recording = Recording.open(resolve("sample", "recordings"))
    port = free_port()
    with open(tmp_path / "sim.log", "wb") as log:
        proc = subprocess.Popen(_recorded_argv(recording, VARIANT, port), stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        await _ready(url, proc)
        plan = refire_traffic_plan(recording)
        k = int(recording.manifest["servers"][VARIANT]["settings"].get("num_speculative_tokens", 0))
        target = Target(VARIANT, url, recording.manifest["pair"]["target_sim_model"], num_spec_tokens=k)
        records: list[RequestRecord] = []
        runner = TrafficRunner(plan, {VARIANT: target}, run_start=time.monotonic(), on_records=records.extend)
        await runner.start()
        summary = await asyncio.wait_for(runner.finished, timeout=90)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert summary.errors == [] and len(records) == len(plan.recorded)
    intended = sorted(r.intended for r in records)
    gaps = [t - intended[0] for t in intended]
    assert gaps == pytest.approx([t for t, _ in plan.recorded], abs=1e-6)  # the recorded schedule, as planned
    out = compare_outputs(recording.records, records, VARIANT)
    assert out["matched"] > 10 and out["differing"] == 0 and out["identical"] == out["matched"]
