"""The bytes the ground-truth server writes: vLLM's completion streams, encoded once per response
shape rather than once per chunk, and its plain responses.

A response's chunks differ from another's of the same shape (endpoint, stream options, prompt
length, tokens, model) only in the request id, so each shape is JSON-encoded once, around a marker
where the id goes; a chunk is then two concatenations and the HTTP chunk framing. Encoding every
chunk with ``json.dumps`` cost the ground-truth server about a third of its CPU, CPU a client
sharing the host would not get.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

WORDS = ("the", " sea", " and", " its", " ships", " sailed", " on", " through", " quiet", " nights")
_MARK = "@@REQUEST-ID@@"  # plain ASCII, so json.dumps leaves it as it is
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
            500: "Internal Server Error"}
CREATED = 1_700_000_000  # vLLM puts the request's creation time here; no client reads it


@dataclass(frozen=True)
class ShapeKey:
    chat: bool
    token_ids: bool
    continuous: bool  # stream_options.continuous_usage_stats: usage in every chunk
    include_usage: bool  # stream_options.include_usage: a usage chunk before [DONE]
    prompt_tokens: int
    tokens: int
    model: str


@dataclass(frozen=True)
class Shape:
    """Each event as (bytes before the id, bytes after it), ``data: `` and the blank line included."""

    tokens: tuple[tuple[bytes, bytes], ...]
    role: tuple[bytes, bytes] | None  # chat: the role chunk sent with the first token
    usage: tuple[bytes, bytes] | None

    def event(self, rid: bytes, i: int) -> bytes:
        """Token ``i``'s chunk (the first comes after the chat role chunk, in the same write)."""
        before, after = self.tokens[i]
        data = frame(before + rid + after)
        if i == 0 and self.role is not None:
            data = frame(self.role[0] + rid + self.role[1]) + data
        return data

    def end(self, rid: bytes) -> bytes:
        """The usage chunk if asked for, ``[DONE]`` and the end of the chunked body."""
        head = frame(self.usage[0] + rid + self.usage[1]) if self.usage is not None else b""
        return head + _DONE


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (SSE bodies go out chunked, as uvicorn sends vLLM's)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


_DONE = frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"  # the last event and the end of the chunked body


def _split(obj: dict[str, Any], prefix: str) -> tuple[bytes, bytes]:
    text = "data: " + json.dumps({"id": prefix + _MARK, **obj}, separators=(",", ":")) + "\n\n"
    before, after = text.split(_MARK)
    return before.encode(), after.encode()


def request_id_bytes(rid: str) -> bytes:
    """The id as it appears inside a JSON string."""
    return json.dumps(rid)[1:-1].encode()


@lru_cache(maxsize=256)
def shape(key: ShapeKey) -> Shape:
    prefix = "chatcmpl-" if key.chat else "cmpl-"
    common = {"object": "chat.completion.chunk" if key.chat else "text_completion", "created": CREATED,
              "model": key.model}
    prompt_ids = [1000 + i for i in range(key.prompt_tokens)]

    def usage(n: int) -> dict[str, int]:
        return {"prompt_tokens": key.prompt_tokens, "total_tokens": key.prompt_tokens + n, "completion_tokens": n}

    events = []
    for i in range(key.tokens):
        reason = "length" if i == key.tokens - 1 else None
        choice: dict[str, Any]
        if key.chat:
            choice = {"index": 0, "delta": {"content": WORDS[i % len(WORDS)]}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": WORDS[i % len(WORDS)], "logprobs": None, "finish_reason": reason,
                      "stop_reason": None}
        if key.token_ids:
            choice["token_ids"] = [2000 + i]
            if i == 0 and not key.chat:
                choice["prompt_token_ids"] = prompt_ids
        chunk: dict[str, Any] = {**common, "choices": [choice]}
        if key.continuous:
            chunk["usage"] = usage(i + 1)
        events.append(_split(chunk, prefix))
    role = None
    if key.chat:
        first: dict[str, Any] = {**common, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                        "logprobs": None, "finish_reason": None}]}
        if key.token_ids:
            first["prompt_token_ids"] = prompt_ids
        if key.continuous:
            first["usage"] = usage(0)
        role = _split(first, prefix)
    tail = _split({**common, "choices": [], "usage": usage(key.tokens)}, prefix) if key.include_usage else None
    return Shape(tuple(events), role, tail)


def whole_body(key: ShapeKey, rid: str) -> bytes:
    """A non-streamed answer with the same tokens."""
    text = "".join(WORDS[i % len(WORDS)] for i in range(key.tokens))
    choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                              if key.chat else {"index": 0, "text": text, "finish_reason": "length"})
    if key.token_ids:
        choice["token_ids"] = [2000 + i for i in range(key.tokens)]
    body = {"id": ("chatcmpl-" if key.chat else "cmpl-") + rid, "object": "chat.completion" if key.chat else
            "text_completion", "created": CREATED, "model": key.model, "choices": [choice],
            "usage": {"prompt_tokens": key.prompt_tokens, "total_tokens": key.prompt_tokens + key.tokens,
                      "completion_tokens": key.tokens}}
    return json.dumps(body).encode()


def response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status, _REASONS[status].encode(), content_type, len(body), body)


def error_response(status: int, message: str) -> bytes:
    kind = {404: "NotFoundError", 500: "InternalServerError"}.get(status, "BadRequestError")
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return response(status, json.dumps(body).encode())


def metrics_text(model: str, running: int, finished: int, prompt_tokens: int, generation_tokens: int) -> bytes:
    """The few vLLM series a client scrapes, under vLLM's names."""
    labels = f'engine="0",model_name="{model}"'
    lines = [
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} 0",
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{{labels},finished_reason="length"}} {finished}',
        "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{labels}}} {prompt_tokens}",
        "# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{labels}}} {generation_tokens}",
    ]
    return ("\n".join(lines) + "\n").encode()
