"""The streaming client against a fake vLLM-shaped server over real sockets."""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp
import pytest

from speclab.model.records import RequestRecord
from speclab.traffic.client import Target, build_body, estimate_spec, run_request, write_tracer
from speclab.traffic.schedule import PlannedRequest

from .fake_server import BAD_LINES, FakeServer

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
    "required": ["name", "arguments"],
}


def _req(endpoint: str = "chat", schema: dict[str, Any] | None = None) -> PlannedRequest:
    return PlannedRequest(
        index=7, request_id="t-0-7", prompt_class="qa", endpoint=endpoint,
        messages=[{"role": "user", "content": "hi"}] if endpoint == "chat" else None,
        prompt="hi" if endpoint == "completions" else None,
        sampling={"max_tokens": 8, "temperature": 0.7, "seed": 42}, schema=schema,
        info={"endpoint": endpoint, "index": 7, "prompt": "hi"},
    )


async def _fire(
    base_url: str, model: str, *, endpoint: str = "chat", k: int = 0, schema: dict[str, Any] | None = None,
    stall: float = 5.0, total: float = 10.0, headers: dict[str, str] | None = None, time_scale: float = 1.0,
) -> RequestRecord:
    out: list[RequestRecord] = []
    start = time.monotonic()
    target = Target("spec", base_url, model, headers=headers or {}, num_spec_tokens=k)
    async with aiohttp.ClientSession() as session:
        await run_request(
            session, target, _req(endpoint, schema), 0.0, out.append, run_start=start,
            timeout=aiohttp.ClientTimeout(total=total, sock_read=stall), time_scale=time_scale,
        )
    assert len(out) == 1
    return out[0]


async def test_the_write_tracer_sees_each_request_once_as_its_body_goes_out(fake_server: FakeServer) -> None:
    written: list[tuple[RequestRecord, float]] = []
    out: list[RequestRecord] = []
    start = time.monotonic()
    target = Target("spec", fake_server.base_url, "ok:n=3:per=1:ttft=0.01:itl=0.001")
    tracer = write_tracer(lambda rec: written.append((rec, time.monotonic() - start)))
    async with aiohttp.ClientSession(trace_configs=[tracer]) as session:
        for _ in range(2):  # a fresh connection, then a pooled one
            await run_request(session, target, _req(), 0.0, out.append, run_start=start,
                              timeout=aiohttp.ClientTimeout(total=10, sock_read=5))
    assert [rec for rec, _ in written] == out and all(r.ok for r in out)
    for rec, t in written:
        assert rec.sent is not None and rec.first_token is not None
        assert rec.sent <= t <= rec.first_token  # after the sent stamp, before anything came back


def test_body_asks_for_usage_token_ids_seed_and_structured_output() -> None:
    body = build_body(_req("chat", SCHEMA), Target("v", "http://x", "m"))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["return_token_ids"] is True
    assert body["seed"] == 42 and body["temperature"] == 0.7 and body["max_tokens"] == 8
    assert body["structured_outputs"] == {"json": SCHEMA}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    completion = build_body(_req("completions"), Target("v", "http://x", "m"))
    assert completion["prompt"] == "hi" and "messages" not in completion


async def test_chat_stream_timestamps_chunks_and_exact_metrics(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "ok:n=7:per=3:ttft=0.02:itl=0.005:metrics=1", k=2)
    assert rec.error_kind is None, rec.error_message
    assert rec.ok
    assert rec.intended <= rec.sent <= rec.first_token <= rec.last_token <= rec.done  # type: ignore[operator]
    assert rec.first_token - rec.sent >= 0.02  # type: ignore[operator]
    # role chunk is not the first token; chunks carry 3, 3, 1 tokens
    assert rec.chunks == 3 and 1 <= rec.token_reads <= 3
    assert rec.output_tokens == 7 and rec.prompt_tokens == 3
    assert rec.output_token_ids == list(range(100, 107))
    assert rec.output_text.startswith("t0 t1 t2")
    assert rec.finish_reason == "length"
    assert (rec.server_queue_ms, rec.server_prefill_ms, rec.server_decode_ms) == (1.5, 20.0, 42.0)
    assert rec.spec.source == "exact" and rec.spec.steps == 2 and rec.spec.accepted == 4
    assert rec.sampling["seed"] == 42
    assert fake_server.seen[0].request_id == "t-0-7"


async def test_spec_counts_estimated_without_metrics(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "ok:n=8:per=3", endpoint="completions", k=2)
    assert rec.ok
    assert rec.chunks == 3 and rec.output_tokens == 8
    assert rec.server_queue_ms is None
    # first chunk is prefill; then steps of 3 (2 accepted) and 2 (1 accepted)
    assert rec.spec.source == "estimated"
    assert (rec.spec.steps, rec.spec.drafted, rec.spec.accepted) == (2, 4, 3)
    assert rec.spec.histogram == [0, 1, 1]


def test_estimate_splits_merged_chunks() -> None:
    spec = estimate_spec([1, 7], k=3)  # 7 > k+1: one full step of 4 and one of 3
    assert (spec.steps, spec.accepted, spec.drafted) == (2, 5, 6)
    assert spec.histogram == [0, 0, 1, 1]


async def test_schema_validity(fake_server: FakeServer) -> None:
    good = await _fire(fake_server.base_url, "json_good:n=5", schema=SCHEMA)
    bad = await _fire(fake_server.base_url, "json_bad:n=5", schema=SCHEMA)
    plain = await _fire(fake_server.base_url, "ok:n=2")
    assert good.schema_valid is True
    assert bad.schema_valid is False
    assert plain.schema_valid is None
    assert fake_server.seen[0].body["structured_outputs"] == {"json": SCHEMA}


async def test_http_errors(fake_server: FakeServer) -> None:
    r500 = await _fire(fake_server.base_url, "http500")
    r429 = await _fire(fake_server.base_url, "http429")
    r400 = await _fire(fake_server.base_url, "http400")
    assert (r500.error_kind, r500.http_status) == ("http_5xx", 500)
    assert "fake 500" in (r500.error_message or "")
    assert r429.error_kind == "http_429"
    assert r400.error_kind == "http_4xx"
    assert not r500.ok


async def test_stream_failures(fake_server: FakeServer) -> None:
    url = fake_server.base_url
    assert (await _fire(url, "error_event")).error_kind == "stream_error_event"
    assert (await _fire(url, "malformed")).error_kind == "malformed_stream"
    truncated = await _fire(url, "truncate:n=4:per=1")
    assert truncated.error_kind == "truncated"
    assert truncated.chunks and truncated.first_token is not None


@pytest.mark.parametrize("where", ["bad", "after"])
@pytest.mark.parametrize("line", range(len(BAD_LINES)))
async def test_every_unparseable_data_line_is_a_malformed_stream_of_its_request(
        fake_server: FakeServer, where: str, line: int) -> None:
    """Mid-stream, with valid chunks and [DONE] after it, or after [DONE]: never skipped."""
    rec = await _fire(fake_server.base_url, f"ok:n=4:per=1:{where}={line}", endpoint="completions")
    assert rec.error_kind == "malformed_stream", (rec.error_kind, rec.error_message)
    assert rec.request_id == "t-0-7" and rec.error_message
    if where == "bad":
        assert rec.first_token is not None and rec.output_text  # what arrived before it is kept


async def test_comments_after_done_are_not_malformed(fake_server: FakeServer) -> None:
    assert (await _fire(fake_server.base_url, "ok:n=2", endpoint="completions")).ok


async def test_stall_with_short_timeout(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "stall:n=4", stall=0.3)
    assert rec.error_kind == "stall"
    assert rec.chunks == 1 and rec.output_tokens == 1


async def test_a_stream_the_server_aborted_is_cut_not_answered(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "abort:n=3")  # a clean [DONE] after finish_reason "abort"
    assert not rec.ok and rec.error_kind == "truncated" and "aborted" in (rec.error_message or "")
    assert rec.finish_reason == "abort" and rec.output_tokens == 3  # what came is kept


async def test_total_timeout(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "ok:n=50:itl=0.02", total=0.3, stall=5.0)
    assert rec.error_kind == "timeout" and rec.error_message == "request took longer than 0.3 s"


async def test_timeouts_stretched_by_a_time_scale_are_quoted_in_modelled_seconds(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "stall:n=4", stall=0.4, time_scale=4.0)  # 0.1 s modelled, 0.4 of wall
    assert rec.error_kind == "stall" and rec.error_message == "no data for 0.1 s"


async def test_connect_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rec = await _fire(f"http://127.0.0.1:{port}", "ok")
    assert rec.error_kind == "connect"
    assert rec.sent is not None and rec.first_token is None


async def test_headers_are_sent_but_never_recorded(fake_server: FakeServer) -> None:
    rec = await _fire(fake_server.base_url, "ok:n=2", headers={"Authorization": "Bearer sekrit"})
    assert fake_server.seen[0].headers["Authorization"] == "Bearer sekrit"
    assert "sekrit" not in repr(rec.to_dict())
    assert "sekrit" not in repr(Target("v", "u", "m", headers={"Authorization": "Bearer sekrit"}))
