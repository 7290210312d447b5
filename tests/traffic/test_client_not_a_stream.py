"""A 200 that is not an event stream (a server or proxy that ignored ``"stream": true``) is a
malformed stream naming what came, never a "truncated" one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from .test_client import _fire

COMPLETION = {"id": "cmpl-1", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


async def _handle(request: web.Request) -> web.StreamResponse:
    mode = (await request.json())["model"]
    if mode == "json":
        return web.json_response(COMPLETION)
    if mode == "json_error":
        return web.json_response({"error": {"message": "streaming is\nnot supported", "code": 400}})
    if mode == "html":
        return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "token_ids": [5], "finish_reason": "stop"}]}
    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
    return resp


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_json_answer_to_a_stream_request_is_malformed_naming_its_content_type(base_url: str) -> None:
    rec = await _fire(base_url, "json")
    assert (rec.error_kind, rec.http_status) == ("malformed_stream", 200)
    assert rec.error_message == "the server answered application/json, not an event stream (text/event-stream)"
    assert rec.first_token is None and not rec.ok


async def test_a_json_error_with_200_quotes_its_message_on_one_line(base_url: str) -> None:
    rec = await _fire(base_url, "json_error")
    assert rec.error_kind == "malformed_stream"
    assert rec.error_message == ("the server answered application/json, not an event stream (text/event-stream): "
                                 "streaming is not supported")


async def test_an_html_page_is_malformed_naming_its_content_type(base_url: str) -> None:
    rec = await _fire(base_url, "html")
    assert rec.error_kind == "malformed_stream"
    assert rec.error_message == "the server answered text/html, not an event stream (text/event-stream)"


async def test_an_event_stream_with_a_charset_is_read(base_url: str) -> None:
    rec = await _fire(base_url, "sse")
    assert rec.ok, (rec.error_kind, rec.error_message)
    assert rec.output_text == "hi" and rec.finish_reason == "stop"
