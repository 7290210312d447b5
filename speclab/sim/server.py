"""The simulator's HTTP server: vLLM 0.33's endpoints over the engine loop, on aiohttp.

``/v1/completions`` and ``/v1/chat/completions`` stream one SSE chunk per engine step (all the
tokens of that step), the way vLLM does with ``--stream-interval 1`` when the client keeps up.
Wire faults (``--sim-fault``) are applied here, after the request is parsed and before or while
the response is written.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from speclab.model.errors import InputError
from speclab.model.names import LAUNCH_TOKEN_ENV

from . import logs
from .api import RequestOutput
from .cli import ServerArgs
from .engine_client import EngineClient
from .prom import SimMetrics
from .serve_loop import Delivery, EngineDeadError, EngineLoop, RequestStream
from .serve_protocol import (
    ChunkBytes,
    IncrementalDetokenizer,
    ParsedRequest,
    RequestError,
    error_body,
    parse_request,
    request_metrics,
    sse,
    usage,
)
from .wire_faults import FaultPlan, WireFaults

VLLM_VERSION = "0.33.0"
OWNED_BY = "speclab-sim (simulated)"
PROTECTED_PREFIXES = ("/v1", "/v2", "/inference")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj), status=status, content_type="application/json")


class SimServer:
    def __init__(self, args: ServerArgs, engine: EngineClient, max_model_len: int, metrics: SimMetrics) -> None:
        self.args = args
        self.engine = engine
        self.max_model_len = max_model_len
        self.metrics = metrics
        self.loop = EngineLoop(engine, metrics, time_scale=args.time_scale,
                               slow_host=args.wire_faults.get("slow_host", 0.0))
        self.faults = WireFaults(args.wire_faults, args.engine.seed)
        self.created = int(time.time())
        self.served = args.served_model_names or [args.engine.model]
        spec = args.engine.speculative
        self.speculative = spec is not None
        self.crash_hook: Callable[[], None] = self._crash

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors_mw, self._auth_mw], client_max_size=64 * 1024**2)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/load", self.load)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        return app

    @web.middleware
    async def _errors_mw(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _json({"detail": "Not Found"}, 404)
        except web.HTTPMethodNotAllowed:
            return _json({"detail": "Method Not Allowed"}, 405)

    @web.middleware
    async def _auth_mw(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        if self.args.api_keys and request.path.startswith(PROTECTED_PREFIXES):
            header = request.headers.get("Authorization", "")
            if not any(header == f"Bearer {key}" for key in self.args.api_keys):
                return _json({"error": "Unauthorized"}, 401)
        return await handler(request)

    async def health(self, request: web.Request) -> web.Response:
        if self.loop.dead is not None:
            return web.Response(status=503)
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # The launch token lets speclab tell the server it started from one already on the port.
        token = os.environ.get(LAUNCH_TOKEN_ENV)
        return _json({"version": VLLM_VERSION, "simulated": True, "sim_time_scale": self.args.time_scale,
                      **({"launch_token": token} if token else {})})

    async def load(self, request: web.Request) -> web.Response:
        return _json({"server_load": self.loop.in_flight})

    async def prometheus(self, request: web.Request) -> web.Response:
        resp = web.Response(body=self.metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {"id": name, "object": "model", "created": self.created, "owned_by": OWNED_BY,
             "root": self.args.engine.model, "parent": None, "max_model_len": self.max_model_len,
             "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                             "created": self.created, "allow_create_engine": False, "allow_sampling": True,
                             "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                             "allow_fine_tuning": False, "organization": "*", "group": None,
                             "is_blocking": False}]}
            for name in self.served
        ]
        return _json({"object": "list", "data": data})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            return _json(error_body(f"JSON decode error: {exc}", "BadRequestError", 400), 400)
        name = body.get("model") if isinstance(body, dict) else None
        if name is not None and name not in self.served:
            return _json(error_body(f"The model `{name}` does not exist.", "NotFoundError", 404, "model"), 404)
        plan = self.faults.plan()
        if plan.http_500:
            return _json(error_body("Internal server error (simulated fault http_500)",
                                    "InternalServerError", 500), 500)
        try:
            parsed = parse_request(body, chat=chat, tokenizer=self.engine.tokenizer,
                                   max_model_len=self.max_model_len, speculative=self.speculative,
                                   server_stream_interval=self.args.stream_interval,
                                   force_usage=self.args.enable_force_include_usage,
                                   priority_scheduling=self.args.engine.scheduling_policy == "priority")
        except RequestError as exc:
            return _json(exc.body(), exc.status)
        for warning in parsed.warnings:
            logs.warning(logs.SRC_API, warning)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            stream = await self.loop.submit(rid, parsed.prompt_ids, parsed.sampling, parsed.priority)
        except EngineDeadError as exc:
            return _json(error_body(f"EngineCore encountered an issue: {exc}", "InternalServerError", 500), 500)
        except InputError as exc:  # the engine refuses the request (e.g. RequestRejectedError)
            return _json(error_body(str(exc), "BadRequestError", 400), 400)
        streamer = _Streamer(self, request, parsed, stream, plan, chat, self.served[0]) if parsed.stream else None
        try:
            if streamer is not None:
                return await streamer.run()
            return await self._complete(parsed, stream, plan, chat)
        except ConnectionResetError:
            assert streamer is not None
            return streamer.resp
        finally:
            self.loop.abort(rid)

    def _finished_response(self) -> None:
        if self.faults.request_finished():
            asyncio.get_running_loop().call_later(0.05, self.crash_hook)

    def _crash(self) -> None:
        logs.error(logs.SRC_CORE, "EngineCore encountered a fatal error. (simulated fault crash_after)",
                   proc=logs.ENGINE)
        os._exit(1)

    async def _complete(self, p: ParsedRequest, stream: RequestStream, plan: FaultPlan,
                        chat: bool) -> web.Response:
        if plan.stall_after_chunks is not None:
            self.loop.abort(stream.request_id)
            await asyncio.Event().wait()  # never answers; the client's timeout ends it
        detok = IncrementalDetokenizer(self.engine.tokenizer, p.prompt_ids, p.sampling.stop, p.include_stop_str)
        token_ids: list[int] = []
        final: RequestOutput | None = None
        while final is None:
            d = await stream.queue.get()
            if d.output is None:
                return _json(error_body(f"EngineCore encountered an issue: {stream.error}",
                                        "InternalServerError", 500), 500)
            token_ids.extend(d.output.new_token_ids)
            detok.add(d.output.new_token_ids)
            if d.output.finished or detok.stop_hit is not None:
                final = d.output
        reason, stop_reason = _finish(final, detok, self.loop, stream)
        text = detok.text
        metrics = self._metrics_for(final, len(token_ids))
        created = int(time.time())
        choice: dict[str, Any]
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                              "annotations": None, "audio": None, "function_call": None,
                                              "tool_calls": [], "reasoning": None},
                      "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                      "stop_reason": stop_reason, "prompt_logprobs": None}
        if p.return_token_ids:
            choice["token_ids"] = token_ids
            if not chat:
                choice["prompt_token_ids"] = p.prompt_ids
        out: dict[str, Any] = {"id": stream.request_id, "object": "chat.completion" if chat else "text_completion",
                               "created": created, "model": self.served[0], "choices": [choice],
                               "service_tier": None, "system_fingerprint": None,
                               "usage": usage(len(p.prompt_ids), len(token_ids))}
        if chat and p.return_token_ids:
            out["prompt_token_ids"] = p.prompt_ids
        if metrics is not None:
            out["metrics"] = metrics
        self._finished_response()
        return _json(out)

    def _metrics_for(self, final: RequestOutput | None, n_tokens: int) -> dict[str, Any] | None:
        if final is None:
            return None
        return request_metrics(final.times, final.spec, n_tokens, timing=self.args.enable_per_request_metrics,
                               spec_mode=self.args.per_request_spec_decode_metrics)


def _finish(out: RequestOutput, detok: IncrementalDetokenizer, loop: EngineLoop,
            stream: RequestStream) -> tuple[str, str | int | None]:
    """finish_reason and stop_reason; a stop string seen here first ends the request in the engine."""
    if detok.stop_hit is not None:
        if not out.finished:
            loop.abort(stream.request_id, reason="stop")
        return "stop", detok.stop_hit
    return out.finish_reason or "stop", out.stop_reason


class _Streamer:
    """Writes one SSE response: role chunk (chat), one chunk per step, usage chunk, [DONE]."""

    def __init__(self, server: SimServer, request: web.Request, p: ParsedRequest, stream: RequestStream,
                 plan: FaultPlan, chat: bool, model: str) -> None:
        self.s, self.request, self.p, self.stream, self.plan, self.chat = server, request, p, stream, plan, chat
        self.base = {"id": stream.request_id, "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(time.time()), "model": model}
        self.resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        self.detok = IncrementalDetokenizer(server.engine.tokenizer, p.prompt_ids, p.sampling.stop,
                                            p.include_stop_str)
        self.n_tokens = 0
        self.content_chunks = 0
        self.first = True
        self.chunk_bytes = ChunkBytes(self.base, chat=chat)

    async def run(self) -> web.StreamResponse:
        await self.resp.prepare(self.request)
        pending_ids: list[int] = []
        pending_text = ""
        while True:
            d: Delivery = await self.stream.queue.get()
            if d.output is None:
                err = error_body(f"EngineCore encountered an issue: {self.stream.error}", "InternalServerError", 500)
                await self.resp.write(sse(err) + b"data: [DONE]\n\n")
                return self.resp
            out = d.output
            self.n_tokens += len(out.new_token_ids)
            pending_ids.extend(out.new_token_ids)
            pending_text += self.detok.add(out.new_token_ids)
            done = out.finished or self.detok.stop_hit is not None
            if done:
                pending_text += self.detok.flush()
            if not (done or self.first or len(pending_ids) >= self.p.stream_interval):
                continue
            if not pending_ids and not pending_text and not done:
                continue
            reason, stop_reason = _finish(out, self.detok, self.s.loop, self.stream) if done else (None, None)
            await self._content(pending_text, pending_ids, reason, stop_reason)
            pending_ids, pending_text = [], ""
            if self.plan.stall_after_chunks is not None and self.content_chunks >= self.plan.stall_after_chunks \
                    and not done:
                self.s.loop.abort(self.stream.request_id)
                await asyncio.Event().wait()  # silent but open, until the client gives up
            if self.plan.malformed_after_chunks == self.content_chunks and not done:
                await self.resp.write(b'data: {"id":"' + self.stream.request_id.encode() + b'","object":"text_compl\n\n')
            if done:
                await self._tail(out)
                return self.resp

    async def _content(self, text: str, ids: list[int], reason: str | None, stop_reason: str | int | None) -> None:
        if not self.first and reason is None and not self.p.return_token_ids:
            counts = (len(self.p.prompt_ids), self.n_tokens) if self.p.continuous_usage else None
            self.content_chunks += 1
            await self.resp.write(self.chunk_bytes.content(text, counts))
            return
        choice: dict[str, Any]
        if self.first and self.chat:
            role: dict[str, Any] = {**self.base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                              "logprobs": None, "finish_reason": None}]}
            if self.p.return_token_ids:
                role["prompt_token_ids"] = self.p.prompt_ids
            if self.p.continuous_usage:
                role["usage"] = usage(len(self.p.prompt_ids), 0)
            await self.resp.write(sse(role))
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": reason}
            if reason is not None:
                choice["stop_reason"] = stop_reason
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": stop_reason}
        if self.p.return_token_ids:
            choice["token_ids"] = ids
            if self.first and not self.chat:
                choice["prompt_token_ids"] = self.p.prompt_ids
        chunk: dict[str, Any] = {**self.base, "choices": [choice]}
        if self.p.continuous_usage:
            chunk["usage"] = usage(len(self.p.prompt_ids), self.n_tokens)
        self.first = False
        self.content_chunks += 1
        await self.resp.write(sse(chunk))

    async def _tail(self, final: RequestOutput) -> None:
        if self.p.include_usage:
            tail: dict[str, Any] = {**self.base, "choices": [], "usage": usage(len(self.p.prompt_ids), self.n_tokens)}
            metrics = self.s._metrics_for(final if final.finished else None, self.n_tokens)
            if metrics is not None:
                tail["metrics"] = metrics
            await self.resp.write(sse(tail))
        await self.resp.write(b"data: [DONE]\n\n")
        await self.resp.write_eof()
        self.s._finished_response()
