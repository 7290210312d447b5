"""Each wire fault, seen from the outside as the client's error taxonomy would classify it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from speclab.model.records import RequestRecord
from speclab.traffic.client import Target, run_request
from speclab.traffic.schedule import PlannedRequest

from .conftest import start_sim
from .sse import post_json, post_stream

BODY = {"prompt": "Hello there", "max_tokens": 12}


async def test_http_500(tmp_path: Path) -> None:
    p = start_sim(["sim-1b", "--sim-fault", "http_500=1"], tmp_path, "h500")
    try:
        status, body = await post_json(p.url + "/v1/completions", BODY)
        assert status == 500 and body["error"]["code"] == 500
    finally:
        assert p.stop() == 0


async def test_malformed_sse(tmp_path: Path) -> None:
    p = start_sim(["sim-1b", "--sim-fault", "malformed_sse=1"], tmp_path, "malformed")
    try:
        events = await post_stream(p.url + "/v1/completions", BODY)
        bad = []
        for e in events[:-1]:
            try:
                json.loads(e)
            except ValueError:
                bad.append(e)
        assert len(bad) == 1 and events[-1] == "[DONE]"
        assert events.index(bad[0]) not in (0, len(events) - 1)  # mid-stream
    finally:
        p.stop()


async def test_the_client_files_every_request_with_a_broken_data_line_as_malformed_stream(tmp_path: Path) -> None:
    """The simulator's broken line sits mid-stream with valid chunks and [DONE] after it: skipping
    it would count the request as answered (``accept`` once passed the malformed_sse lab so)."""
    p = start_sim(["sim-1b", "--sim-fault", "malformed_sse=1"], tmp_path, "malformed-client")
    try:
        records: list[RequestRecord] = []
        target = Target("k4", p.url, "sim-1b")
        async with aiohttp.ClientSession() as session:
            for i, endpoint in enumerate(["completions", "chat"] * 3):
                req = PlannedRequest(
                    index=i, request_id=f"m-{i}", prompt_class="qa", endpoint=endpoint,
                    messages=[{"role": "user", "content": "Hello there"}] if endpoint == "chat" else None,
                    prompt="Hello there" if endpoint == "completions" else None,
                    sampling={"max_tokens": 12, "temperature": 0.0}, schema=None, info={"endpoint": endpoint, "index": i})
                await run_request(session, target, req, 0.0, records.append, run_start=time.monotonic(),
                                  timeout=aiohttp.ClientTimeout(total=60, sock_read=30))
        assert [(r.request_id, r.error_kind) for r in records] == [(f"m-{i}", "malformed_stream") for i in range(6)]
        assert all("invalid JSON in an SSE event" in (r.error_message or "") for r in records)
    finally:
        p.stop()


async def test_stall_keeps_connection_open(tmp_path: Path) -> None:
    p = start_sim(["sim-1b", "--sim-fault", "stall=1"], tmp_path, "stall")
    try:
        got: list[bytes] = []

        async def read_all(r: aiohttp.ClientResponse) -> None:
            async for line in r.content:
                got.append(line)

        async with aiohttp.ClientSession() as s, s.post(p.url + "/v1/completions", json={**BODY, "stream": True}) as r:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(read_all(r), 1.0)
            assert not r.content.at_eof()  # silent, not closed
        data = [g for g in got if g.startswith(b"data: ")]
        assert data and b"[DONE]" not in b"".join(got)
    finally:
        p.stop()


async def test_crash_after(tmp_path: Path) -> None:
    p = start_sim(["sim-1b", "--sim-fault", "crash_after=2"], tmp_path, "crash")
    try:
        for _ in range(2):
            status, _ = await post_json(p.url + "/v1/completions", BODY)
            assert status == 200
        code = await asyncio.to_thread(p.proc.wait, 60)
        assert code == 1
        assert "EngineCore encountered a fatal error" in p.log()
    finally:
        p.stop()
