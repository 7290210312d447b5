"""The client against the real simulator process: vLLM's wire format end to end."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from speclab.model.records import RequestRecord
from speclab.model.scenario import load_scenario
from speclab.traffic.client import Target
from speclab.traffic.engine import TrafficEngine
from speclab.traffic.schedule import build_plan

K = 3


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = json.dumps({"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": K})
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclab.sim", "sim-8b", "--host", "127.0.0.1", "--port", str(port),
         "--speculative-config", spec, "--enable-per-request-metrics", "--per-request-spec-decode-metrics", "summary"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the simulator did not become ready")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def test_mixed_scenario_against_the_simulator(sim_url: str) -> None:
    plan = build_plan(load_scenario("mixed"), requests=12, rate=20.0)
    records: list[RequestRecord] = []

    def emit(message: tuple[str, Any]) -> None:
        if message[0] == "records":
            records.extend(message[1])

    engine = TrafficEngine(plan, [Target("spec", sim_url, "sim-8b", num_spec_tokens=K)],
                           run_start=time.monotonic(), emit=emit)
    engine.begin(engine.now())
    await asyncio.wait_for(engine.run(), 60)
    assert len(records) == 12
    for rec in records:
        assert rec.ok, rec.error_message
        assert rec.sent is not None and rec.first_token is not None and rec.done is not None
        assert rec.sent <= rec.first_token <= rec.done
        assert rec.output_tokens == len(rec.output_token_ids) > 0
        assert rec.chunks * (K + 1) >= rec.output_tokens  # no chunk carries more than one step
        assert rec.server_queue_ms is not None and rec.server_decode_ms is not None
        assert rec.spec.source == "exact" and rec.spec.num_spec_tokens == K
        assert sum(rec.spec.histogram) == rec.spec.steps
        if rec.prompt_class == "tool_call":
            assert rec.schema_valid is not None
