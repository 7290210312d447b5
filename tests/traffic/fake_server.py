"""A minimal vLLM-shaped streaming server for traffic tests, bound to 127.0.0.1 on a free port.

The request's ``model`` picks the behaviour, with options after colons, e.g.
``ok:n=6:per=3:ttft=0.02:itl=0.005:metrics=1`` streams 6 tokens in chunks of up to 3.
Modes: ok, stall, http500, http429, http400, error_event, malformed, truncate, abort (the last chunk's
finish_reason is "abort", as vLLM ends what is in flight at shutdown), json_good, json_bad;
``bad=I`` sends ``BAD_LINES[I]`` after the first content chunk and then streams on to [DONE] (as the
simulator's malformed_sse fault does), ``after=I`` sends it after [DONE].
It records per request id its arrival, first-chunk send time and the peak number in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# Unparseable SSE data, each a malformed_stream of the request that carries it.
BAD_LINES: tuple[bytes, ...] = (
    b'data: {"id":"cmpl-1","object":"text_compl\n\n',  # cut off, as the simulator's fault
    b"data:\n\n",  # an empty payload
    b"data: \xff\xfe{}\n\n",  # not UTF-8
    b"data: [1, 2]\n\n",  # JSON, not an object
    b'data: {"choices": []}\ndata: {"x": 1}\n\n',  # two data lines join into one unparseable event
    b"data: {}\n\n",  # neither choices nor usage
    b"<html>502 Bad Gateway</html>\n\n",  # not an SSE line at all
)


@dataclass
class Seen:
    request_id: str
    body: dict[str, Any]
    headers: dict[str, str]
    arrived: float
    first_chunk_sent: float | None = None


@dataclass
class FakeServer:
    host: str = "127.0.0.1"
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    peers: set[tuple[str, int]] = field(default_factory=set)  # client sockets seen (connection reuse)
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> FakeServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode, opts = _parse_model(body.get("model", "ok"))
        seen = Seen(request.headers.get("X-Request-Id", ""), body, dict(request.headers), time.monotonic())
        self.seen.append(seen)
        if request.transport is not None:
            self.peers.add(request.transport.get_extra_info("peername"))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._respond(request, body, mode, opts, seen)
        finally:
            self.in_flight -= 1

    async def _respond(
        self, request: web.Request, body: dict[str, Any], mode: str, opts: dict[str, float], seen: Seen
    ) -> web.StreamResponse:
        if mode in ("http500", "http429", "http400"):
            status = int(mode[4:])
            return web.json_response({"error": {"message": f"fake {status}", "code": status}}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chat = request.path.endswith("/chat/completions")
        n = int(opts.get("n", 4))
        per = int(opts.get("per", 1))
        await asyncio.sleep(opts.get("ttft", 0.0))

        async def send(obj: Any) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        if chat:
            await send({"object": "chat.completion.chunk", "prompt_token_ids": [1, 2, 3],
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "token_ids": []}]})
        await resp.write(b": keep-alive comment\n\n")
        if mode == "malformed":
            await resp.write(b"data: {not json\n\n")
            return resp
        if mode == "error_event":
            await send({"error": {"message": "engine exploded", "code": 500}})
            await resp.write(b"data: [DONE]\n\n")
            return resp
        texts = _texts(mode, n)
        produced = 0
        token = 100
        while produced < n:
            take = min(per, n - produced)
            ids = list(range(token, token + take))
            token += take
            piece = "".join(texts[produced : produced + take])
            produced += take
            last = produced >= n
            choice: dict[str, Any] = {"index": 0, "token_ids": ids, "finish_reason": ("abort" if mode == "abort" else "length") if last else None}
            if chat:
                choice["delta"] = {"content": piece}
            else:
                choice["text"] = piece
            if seen.first_chunk_sent is None:
                seen.first_chunk_sent = time.monotonic()
            await send({"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": produced}})
            if "bad" in opts and produced <= per:
                await resp.write(BAD_LINES[int(opts["bad"])])
            if mode == "stall":
                await asyncio.sleep(3600)
            if mode == "truncate" and produced >= min(n, per):
                await asyncio.sleep(0.01)
                assert request.transport is not None
                request.transport.close()
                return resp
            if not last:
                await asyncio.sleep(opts.get("itl", 0.0))
        final: dict[str, Any] = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
        if opts.get("metrics", 0):
            steps = -(-(n - 1) // per) if n > 1 else 0
            k = max(per - 1, 1)
            final["metrics"] = {
                "queue_time_ms": 1.5, "time_to_first_token_ms": 20.0, "generation_time_ms": 42.0,
                "speculative_decoding": {
                    "num_spec_steps": steps, "num_draft_tokens": steps * k,
                    "num_accepted_draft_tokens": n - 1 - steps, "num_spec_tokens": k,
                    "acceptance_histogram": [0] * k + [steps],
                },
            }
        await send(final)
        await resp.write(b"data: [DONE]\n\n")
        if "after" in opts:
            await resp.write(BAD_LINES[int(opts["after"])])
        return resp


def _parse_model(model: str) -> tuple[str, dict[str, float]]:
    mode, *rest = model.split(":")
    opts = {}
    for part in rest:
        key, _, value = part.partition("=")
        opts[key] = float(value)
    return mode, opts


def _texts(mode: str, n: int) -> list[str]:
    if mode == "json_good":
        whole = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    elif mode == "json_bad":
        whole = '{"name": "get_weather", "arguments": '
    else:
        return [f"t{i} " for i in range(n)]
    size = -(-len(whole) // n)
    pieces = [whole[i * size : (i + 1) * size] for i in range(n)]
    return pieces
