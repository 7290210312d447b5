"""One streamed request against one variant, recorded whatever happens.

``run_request`` never raises and never loses a record: every outcome (success, HTTP error,
timeout, stall, broken stream, cancellation) ends in exactly one ``RequestRecord`` passed to the
sink. Per chunk it does little: a clock read as the bytes arrive (``arrivals``), SSE split, one
``orjson.loads`` (3-4x the stdlib's speed on vLLM's chunks), a few counters, and the token ids and text the gates compare. Nothing
per chunk is kept beyond those: the estimate of speculative steps is a histogram of k+1 counts.
Headers (which may carry an API key) go to the server only; they are never stored or logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jsonschema
import orjson

from speclab.model.gateway import BACKEND_HEADER
from speclab.model.names import CountSource, ErrorKind
from speclab.model.records import RequestRecord, SpecCounts
from speclab.servers.backends import EngineId
from speclab.servers.backends.base import ResponseMetrics
from speclab.servers.backends.registry import BACKENDS

from .arrivals import unwatch, watch
from .schedule import PlannedRequest
from .sse import DONE, MalformedStream, SSEParser

STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
EVENT_STREAM = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Target:
    """Where one variant is served. ``headers`` (auth) never appear in a repr, log or record."""

    variant: str
    base_url: str
    model: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    num_spec_tokens: int = 0
    epoch: int = 1  # the variant's config epoch; records sent here carry it
    engine: EngineId = EngineId.VLLM  # whose per-request metrics the responses carry (attached: vLLM's)


class _StreamError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def schema_valid(schema: dict[str, Any], text: str) -> bool:
    """Does ``text`` parse as JSON and satisfy ``schema``? Validators are cached per schema object."""
    cached = _validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cached = (schema, cls(schema))
        _validators[id(schema)] = cached
    try:
        instance = orjson.loads(text)
    except ValueError:
        return False
    return bool(cached[1].is_valid(instance))


def build_body(req: PlannedRequest, target: Target) -> dict[str, Any]:
    body: dict[str, Any] = {"model": target.model}
    if req.endpoint == "chat":
        body["messages"] = req.messages
    else:
        body["prompt"] = req.prompt
    body.update(req.sampling)
    body["stream"] = True
    body["stream_options"] = STREAM_OPTIONS
    body["return_token_ids"] = True
    if req.schema is not None:
        body["structured_outputs"] = {"json": req.schema}
    return body


def count_step_chunk(hist: list[int], n: int) -> None:
    """Add one chunk after the first to ``hist`` (k+1 counts): n ≤ k+1 tokens is one verify step
    accepting n−1 drafts; a larger (merged) chunk counts as full steps plus one."""
    width = len(hist)
    while n > 0:
        take = n if n < width else width
        hist[take - 1] += 1
        n -= take


def spec_from_histogram(hist: list[int], k: int) -> SpecCounts:
    steps = sum(hist)
    accepted = sum(j * c for j, c in enumerate(hist))
    return SpecCounts(steps=steps, drafted=steps * k, accepted=accepted, histogram=hist,
                      num_spec_tokens=k, source=CountSource.ESTIMATED.value)


def estimate_spec(chunk_tokens: list[int], k: int) -> SpecCounts:
    """Spec counts from tokens per chunk (the first chunk is prefill), as a stream estimates them."""
    hist = [0] * (k + 1)
    for n in chunk_tokens[1:]:
        count_step_chunk(hist, n)
    return spec_from_histogram(hist, k)


def write_tracer(on_written: Callable[[RequestRecord], None]) -> aiohttp.TraceConfig:
    """A session trace that calls ``on_written(record)`` as a request's body goes to the socket.

    aiohttp writes a request's body in a task of its own. The worker starts that task eagerly
    (``eager_write``, as aiohttp does from Python 3.12), so the body normally leaves within
    ``session.post``; what remains between the ``sent`` stamp and the write (taking a pooled
    connection, building the request, or a full socket buffer) is the client's error on the way
    out, measured here per request. The body is one ``bytes`` write, so the callback runs once per
    request, just before that write.
    """

    async def chunk_sent(_session: aiohttp.ClientSession, ctx: Any, _params: Any) -> None:
        rec = ctx.trace_request_ctx
        if rec is not None:
            on_written(rec)

    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(chunk_sent)
    config.freeze()
    return config


async def run_request(
    session: aiohttp.ClientSession,
    target: Target,
    req: PlannedRequest,
    intended: float,
    sink: Callable[[RequestRecord], None],
    *,
    run_start: float,
    timeout: aiohttp.ClientTimeout,
    warmup: bool = False,
    worker: int = 0,
    on_sent: Callable[[RequestRecord], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    time_scale: float = 1.0,
) -> None:
    """Send one request and hand its record to ``sink``, whatever happens. ``time_scale``: the
    simulators' S, by which ``timeout`` was stretched; an error message quotes it in modelled seconds."""
    rec = RequestRecord(
        request_id=req.request_id, variant=target.variant, prompt_class=req.prompt_class,
        intended=intended, warmup=warmup, epoch=target.epoch, worker=worker, sampling=req.sampling, prompt=req.info,
        tenant=req.tenant, route=PATHS[req.endpoint],
    )
    state = _Stream(rec, run_start, clock, target.num_spec_tokens)
    try:
        body = orjson.dumps(build_body(req, target))
        headers = {**req.headers, "Content-Type": "application/json", "X-Request-Id": req.request_id,
                   **target.headers}
        url = target.base_url.rstrip("/") + PATHS[req.endpoint]
        rec.sent = clock() - run_start
        if on_sent is not None:
            on_sent(rec)
        async with session.post(url, data=body, headers=headers, timeout=timeout, trace_request_ctx=rec) as resp:
            rec.http_status = resp.status
            rec.backend = resp.headers.get(BACKEND_HEADER)
            if resp.status != 200:
                raise _StreamError(_status_kind(resp.status), await _error_text(resp))
            if resp.content_type != EVENT_STREAM:  # once per response: a JSON body is no truncated stream
                raise _StreamError(ErrorKind.MALFORMED_STREAM, await _not_a_stream(resp))
            await state.consume(resp)
        if rec.finish_reason == "abort":  # vLLM ended it (shutdown, an engine abort): cut, though the stream closed cleanly
            raise _StreamError(ErrorKind.TRUNCATED, 'the server aborted the request (finish_reason "abort")')
        state.finish(req.schema, BACKENDS[target.engine].parse_response_metrics)
    except _StreamError as error:
        state.fail(error.kind, str(error))
    except asyncio.CancelledError:
        state.fail(ErrorKind.CANCELLED, "cancelled at the end of the run")
        sink(rec)
        raise
    except aiohttp.SocketTimeoutError:
        state.fail(ErrorKind.STALL, f"no data for {(timeout.sock_read or 0.0) / time_scale:g} s")
    except aiohttp.ConnectionTimeoutError:
        state.fail(ErrorKind.CONNECT, f"connect timed out to {target.base_url}")
    except aiohttp.ClientConnectorError as error:
        state.fail(ErrorKind.CONNECT, f"cannot connect to {target.base_url}: {error.strerror or error}")
    except asyncio.TimeoutError:  # a distinct class before Python 3.11
        state.fail(ErrorKind.TIMEOUT, f"request took longer than {(timeout.total or 0.0) / time_scale:g} s")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as error:
        state.fail(ErrorKind.TRUNCATED, f"connection closed before [DONE]: {type(error).__name__}")
    except MalformedStream as error:
        state.fail(ErrorKind.MALFORMED_STREAM, str(error))
    except Exception as error:  # never lose a record, whatever broke
        state.fail(ErrorKind.MALFORMED_STREAM, f"{type(error).__name__}: {error}")
    sink(rec)


def _status_kind(status: int) -> ErrorKind:
    if status == 429:
        return ErrorKind.HTTP_429
    return ErrorKind.HTTP_5XX if status >= 500 else ErrorKind.HTTP_4XX


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    try:
        raw = await asyncio.wait_for(resp.content.read(2048), 2.0)
        text = raw.decode("utf-8", "replace")
        try:
            data = json.loads(text)
            if isinstance(data, dict):
                err = data.get("error", data)
                text = str(err.get("message", err) if isinstance(err, dict) else err)
        except ValueError:
            pass
    except Exception:
        text = ""
    first = text.strip().splitlines()[0][:200] if text.strip() else (resp.reason or "")
    return f"HTTP {resp.status}: {first}"


async def _not_a_stream(resp: aiohttp.ClientResponse) -> str:
    """A 200 that is not ``text/event-stream`` (a server or proxy that ignored ``"stream": true``):
    its content type, and the error message it carries, if it is a JSON error."""
    kind = resp.content_type if resp.headers.get(aiohttp.hdrs.CONTENT_TYPE) else "no content type"
    message = f"the server answered {kind}, not an event stream ({EVENT_STREAM})"
    error: Any = None
    with contextlib.suppress(Exception):
        error = json.loads(await asyncio.wait_for(resp.content.read(2048), 2.0)).get("error")
    if isinstance(error, dict):
        error = error.get("message", error)
    detail = " ".join(str(error).split())[:200] if error else ""
    return f"{message}: {detail}" if detail else message


class _Stream:
    """Per-request parse state; the hot path is ``consume``."""

    __slots__ = ("clock", "counted", "done_seen", "k", "metrics", "prev_usage", "rec", "run_start", "steps", "texts")

    def __init__(self, rec: RequestRecord, run_start: float, clock: Callable[[], float], k: int = 0) -> None:
        self.rec = rec
        self.run_start = run_start
        self.clock = clock
        self.k = k
        self.texts: list[str] = []
        self.metrics: dict[str, Any] | None = None
        self.prev_usage = 0
        self.counted = 0  # tokens counted from the chunks
        self.steps = [0] * (k + 1) if k > 0 else None  # estimated verify steps by drafts accepted
        self.done_seen = False

    async def consume(self, resp: aiohttp.ClientResponse) -> None:
        parser = SSEParser()
        clock, run_start, rec = self.clock, self.run_start, self.rec
        arrivals = watch(resp.content, clock)
        try:
            async for data in resp.content.iter_any():
                chunks = rec.chunks
                for piece, at in arrivals.split(data, clock()):
                    self._piece(parser, piece, at - run_start)
                if rec.chunks != chunks:
                    rec.token_reads += 1
                if self.done_seen:
                    # Read to the end of the body so the connection goes back to the pool; whatever
                    # follows [DONE] is not skipped unread.
                    rest = b""
                    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                        rest = await resp.content.read()
                    after = parser.feed(rest + b"\n\n") if rest.strip() or parser.pending else []
                    if after:
                        raise _StreamError(ErrorKind.MALFORMED_STREAM, f"an SSE event after [DONE]: {after[0][:80]!r}")
                    return
        finally:
            unwatch(resp.content)
        if parser.pending:
            raise _StreamError(ErrorKind.TRUNCATED, "stream ended in the middle of an event")
        raise _StreamError(ErrorKind.TRUNCATED, "stream closed before [DONE]")

    def _piece(self, parser: SSEParser, data: bytes, now: float) -> None:
        """The events that ``data`` (bytes that arrived at ``now``, run clock) completes."""
        try:
            payloads = parser.feed(data)
        except MalformedStream as error:  # keep what came before the bad line, then fail
            for payload in error.events:
                if payload == DONE or self.done_seen:
                    break
                self._event(payload, now)
            raise
        for payload in payloads:
            if self.done_seen:
                raise _StreamError(ErrorKind.MALFORMED_STREAM, f"an SSE event after [DONE]: {payload[:80]!r}")
            if payload == DONE:
                self.done_seen = True
                self.rec.done = now
                continue
            self._event(payload, now)

    def _event(self, payload: bytes, now: float) -> None:
        try:
            obj = orjson.loads(payload)
        except ValueError as error:
            raise _StreamError(ErrorKind.MALFORMED_STREAM, f"invalid JSON in an SSE event: {error}") from None
        if type(obj) is not dict:
            raise _StreamError(ErrorKind.MALFORMED_STREAM, "an SSE event that is not a JSON object")
        choices = obj.get("choices")
        if not choices:
            self._other(obj, choices)
            return
        rec = self.rec
        choice = choices[0]
        ids = choice.get("token_ids")
        delta = choice.get("delta")
        text = delta.get("content") if delta is not None else choice.get("text")
        prompt_ids = obj.get("prompt_token_ids") or choice.get("prompt_token_ids")
        if prompt_ids:
            rec.prompt_tokens = len(prompt_ids)
        if ids is not None:
            n = len(ids)
            if n:
                rec.output_token_ids.extend(ids)
        else:
            usage = obj.get("usage")
            if usage is not None:
                total = int(usage.get("completion_tokens") or 0)
                n, self.prev_usage = total - self.prev_usage, total
            else:
                n = 1 if text else 0
        if n > 0 or text:
            if rec.first_token is None:
                rec.first_token = now
            elif self.steps is not None and n > 0:
                count_step_chunk(self.steps, n)
            rec.last_token = now
            rec.chunks += 1
            if n > 0:
                self.counted += n
        if text:
            self.texts.append(text)
        logprobs = choice.get("logprobs")
        if logprobs:
            rec.output_logprobs.extend(_logprob_entries(logprobs))
        reason = choice.get("finish_reason")
        if reason is not None:
            rec.finish_reason = reason

    def _other(self, obj: dict[str, Any], choices: Any) -> None:
        """An event without choices: an error event, or the usage (and metrics) chunk."""
        if "error" in obj:
            err = obj["error"]
            message = err.get("message", err) if isinstance(err, dict) else err
            raise _StreamError(ErrorKind.STREAM_ERROR_EVENT, str(message)[:300])
        usage = obj.get("usage")
        if choices is None and usage is None:
            raise _StreamError(ErrorKind.MALFORMED_STREAM, "an SSE event with neither choices nor usage")
        if usage:
            self.rec.prompt_tokens = int(usage.get("prompt_tokens") or self.rec.prompt_tokens)
            self.rec.output_tokens = int(usage.get("completion_tokens") or 0)
        if obj.get("metrics"):
            self.metrics = obj["metrics"]

    def finish(self, schema: dict[str, Any] | None,
               read_metrics: Callable[[dict[str, Any]], ResponseMetrics]) -> None:
        rec = self.rec
        rec.output_text = "".join(self.texts)
        if rec.output_tokens == 0:
            rec.output_tokens = self.counted
        metrics = self.metrics
        if metrics:
            server = read_metrics(metrics)
            rec.server_queue_ms = server.queue_ms
            rec.server_prefill_ms = server.prefill_ms
            rec.server_decode_ms = server.decode_ms
            if server.spec is not None:
                rec.spec = server.spec
        if rec.spec.source == CountSource.NONE.value and self.steps is not None:
            rec.spec = spec_from_histogram(self.steps, self.k)
        if schema is not None:
            rec.schema_valid = schema_valid(schema, rec.output_text)

    def fail(self, kind: ErrorKind, message: str) -> None:
        rec = self.rec
        rec.error_kind = kind.value
        rec.error_message = message
        rec.output_text = "".join(self.texts)
        if rec.output_tokens == 0:
            rec.output_tokens = self.counted


def _logprob_entries(logprobs: Any) -> list[dict[str, Any]]:
    """One chunk's logprobs as entries: chat's ``content`` list, or completions' parallel lists."""
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    if isinstance(content, list):
        return [{"token": e.get("token"), "logprob": e.get("logprob"),
                 "top": {t.get("token"): t.get("logprob") for t in e.get("top_logprobs") or []}}
                for e in content if isinstance(e, dict)]
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    return [{"token": t, "logprob": v, "top": dict(top or {})} for t, v, top in zip(tokens, values, tops, strict=False)]
