"""OpenAI-compatible request parsing and response shapes, as vLLM 0.33 serves them.

Kept apart from the HTTP plumbing so the wire format (field names, which nulls appear, the
per-request ``metrics`` object) can be read in one place and unit-tested without sockets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .api import RequestSpecStats, RequestTimes, SamplingParams, Tokenizer
from .grammar import GrammarError, GrammarSpec, spec_from_request, validate


class RequestError(Exception):
    """A request vLLM would refuse; rendered as vLLM's JSON error object."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.err_type, self.status, self.param)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


@dataclass(slots=True)
class ParsedRequest:
    chat: bool
    prompt_ids: list[int]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool
    include_stop_str: bool
    stream_interval: int
    priority: int
    warnings: list[str]


def _num(body: dict[str, Any], key: str, default: float, kind: type = float) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise RequestError(f"{key}: expected {'an integer' if kind is int else 'a number'}, got {value!r}", param=key)
    return kind(value)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise RequestError("messages: content must be a string or a list of parts", param="messages")


def _structured(body: dict[str, Any], chat: bool, warnings: list[str]) -> GrammarSpec | None:
    """The request's constraint, refused with vLLM's HTTP 400 text and ``param`` where vLLM refuses it."""
    try:
        spec = spec_from_request(body, chat=chat)
        if spec is not None:
            validate(spec)
    except GrammarError as exc:
        raise RequestError(str(exc), param=exc.param) from None
    if spec is not None:
        warnings.extend(f"{name} is accepted but not acted on by vLLM 0.33" for name in spec.ignored)
    return spec


# Sampling fields vLLM acts on and the simulator's models do not, with the value that changes nothing
# (as is null): another value is served as if it were that one, with a warning in the server's log.
NOT_MODELLED_FIELDS: dict[str, Any] = {
    "logprobs": False, "top_logprobs": 0, "prompt_logprobs": None, "presence_penalty": 0, "frequency_penalty": 0,
    "repetition_penalty": 1, "min_tokens": 0, "min_p": 0, "logit_bias": {}, "bad_words": [], "allowed_token_ids": None,
}


def _not_modelled(body: dict[str, Any]) -> list[str]:
    def acts(key: str, value: Any) -> bool:  # logprobs=0 asks for the sampled token's: only false is neutral
        return value is not False if key == "logprobs" else value != NOT_MODELLED_FIELDS[key]

    return [f"{key}={body[key]!r} is accepted but not modelled by speclab-sim: the output ignores it"
            for key in NOT_MODELLED_FIELDS if body.get(key) is not None and acts(key, body[key])]


def parse_request(body: Any, *, chat: bool, tokenizer: Tokenizer, max_model_len: int, speculative: bool,
                  server_stream_interval: int, force_usage: bool, priority_scheduling: bool = False) -> ParsedRequest:
    """The request's engine inputs, refused as vLLM 0.33 refuses them (``RequestError``: HTTP 400);
    ``priority_scheduling``: the server runs ``--scheduling-policy priority``."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    warnings = [f"The {key} parameter was removed in v0.12.0 and is ignored; use structured_outputs"
                for key in ("guided_json", "guided_regex", "guided_choice", "guided_grammar") if key in body]
    if _num(body, "n", 1, int) != 1:
        raise RequestError("speclab-sim serves n=1 only", param="n")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: expected a non-empty list", param="messages")
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise RequestError("messages: each message needs a role", param="messages")
            msgs.append({"role": m["role"], "content": _text_of(m.get("content"))})
        prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(msgs))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = tokenizer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_ids = list(prompt)
        else:
            raise RequestError("prompt: expected a string or a list of token ids (one prompt per request)",
                               param="prompt")
    if not prompt_ids:
        raise RequestError("The prompt cannot be empty", param="prompt")
    n_in = len(prompt_ids)
    if n_in >= max_model_len:
        raise RequestError(f"This model's maximum context length is {max_model_len} tokens. However, your "
                           f"request has {n_in} input tokens. Please reduce the length of the input messages.")
    default_max = max_model_len - n_in if chat else 16
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _num(body, key, default_max, int)
    if max_tokens < 1:
        raise RequestError(f"{key} must be at least 1, got {max_tokens}.", param=key)
    if max_tokens > max_model_len - n_in:
        raise RequestError(f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                           f"maximum context length is {max_model_len} tokens and your request has {n_in} input "
                           f"tokens ({max_tokens} > {max_model_len} - {n_in}).", param=key)
    temperature = _num(body, "temperature", 1.0)
    top_p = _num(body, "top_p", 1.0)
    top_k = _num(body, "top_k", -1, int)
    min_p = _num(body, "min_p", 0.0)
    if temperature < 0:
        raise RequestError(f"temperature must be non-negative, got {temperature}.", param="temperature")
    if not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.", param="top_p")
    if speculative and (min_p > 0 or body.get("logit_bias")):
        raise RequestError("The min_p and logit_bias sampling parameters are not yet supported with "
                           "speculative decoding.")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("stop: expected a string or a list of non-empty strings", param="stop")
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) for t in stop_ids):
        raise RequestError("stop_token_ids: expected a list of integers", param="stop_token_ids")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(f"seed: expected an integer, got {seed!r}", param="seed")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    stream = bool(body.get("stream", False))
    if opts and not stream:
        raise RequestError("Stream options can only be defined when `stream=True`.", param="stream_options")
    include_usage = bool(opts.get("include_usage")) or force_usage
    continuous = include_usage and (bool(opts.get("continuous_usage_stats")) or force_usage)
    interval = max(server_stream_interval, _num(body, "stream_interval", 1, int))
    priority = _num(body, "priority", 0, int)
    if priority != 0 and not priority_scheduling:
        raise RequestError(f"Got priority {priority} but Priority scheduling is not enabled.", param="priority")
    warnings += _not_modelled(body)
    sampling = SamplingParams(
        max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
        stop=list(stop), stop_token_ids=list(stop_ids), ignore_eos=bool(body.get("ignore_eos", False)),
        structured=_structured(body, chat, warnings),
    )
    return ParsedRequest(
        chat=chat, prompt_ids=prompt_ids, sampling=sampling, stream=stream, include_usage=include_usage,
        continuous_usage=continuous, return_token_ids=bool(body.get("return_token_ids", False)),
        include_stop_str=bool(body.get("include_stop_str_in_output", False)), stream_interval=interval,
        priority=priority, warnings=warnings,
    )


class IncrementalDetokenizer:
    """vLLM's prefix/read-offset detokenisation plus stop strings, with stop-string hold-back."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], stop: list[str], include_stop: bool) -> None:
        self._tok = tokenizer
        self._ids = list(prompt_ids[-6:])
        self._prefix = 0
        self._read = len(self._ids)
        self._stop = stop
        self._include_stop = include_stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""
        self._emitted = 0
        self.stop_hit: str | None = None

    def add(self, token_ids: list[int]) -> str:
        """Feed a step's tokens; return the newly releasable text (held back near a possible stop)."""
        if self.stop_hit is not None:
            return ""
        eos = self._tok.eos_token_id
        self._ids.extend(t for t in token_ids if t != eos)
        prefix_text = self._tok.decode(self._ids[self._prefix:self._read])
        new_text = self._tok.decode(self._ids[self._prefix:])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.text += new_text[len(prefix_text):]
            self._prefix, self._read = self._read, len(self._ids)
        if self._stop:
            start = max(0, self._emitted - self._hold)
            hits = [(idx, s) for s in self._stop if (idx := self.text.find(s, start)) >= 0]
            if hits:
                idx, s = min(hits)
                self.stop_hit = s
                self.text = self.text[: idx + (len(s) if self._include_stop else 0)]
                return self._release(len(self.text))
            return self._release(len(self.text) - self._hold)
        return self._release(len(self.text))

    def flush(self) -> str:
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        if upto <= self._emitted:
            return ""
        out = self.text[self._emitted:upto]
        self._emitted = upto
        return out


def request_metrics(times: RequestTimes | None, spec: RequestSpecStats | None, n_tokens: int, *,
                    timing: bool, spec_mode: str) -> dict[str, Any] | None:
    """vLLM's PerRequestMetrics (modelled ms), None-valued fields dropped as vLLM's exclude_none does."""
    out: dict[str, Any] = {}
    if timing and times is not None and times.scheduled is not None:
        first, last, sched = times.first_token, times.last_token, times.scheduled
        out["queue_time_ms"] = (sched - times.queued) * 1000.0
        if first is not None:
            out["time_to_first_token_ms"] = (first - sched) * 1000.0
        if first is not None and last is not None:
            out["generation_time_ms"] = (last - first) * 1000.0
            out["mean_itl_ms"] = (last - first) / (n_tokens - 1) * 1000.0 if n_tokens > 1 else 0.0
            out["tokens_per_second"] = n_tokens / (last - sched) if last > sched else 0.0
    if spec is not None and spec_mode in ("summary", "detailed"):
        sd: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + spec.accepted / spec.steps if spec.steps else 1.0,
            "draft_acceptance_rate": spec.accepted / spec.drafted if spec.drafted else 0.0,
            "acceptance_histogram": list(spec.histogram),
            "num_spec_steps": spec.steps,
            "num_accepted_draft_tokens": spec.accepted,
            "num_draft_tokens": spec.drafted,
            "num_spec_tokens": spec.num_spec_tokens,
        }
        if spec_mode == "detailed":
            sd["per_step_accepted"] = list(spec.per_step_accepted)
            sd["per_step_drafted"] = list(spec.per_step_drafted)
        out["speculative_decoding"] = sd
    return out or None


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class ChunkBytes:
    """A stream's mid-stream content chunk, the bytes ``sse`` would write for it, from a template.

    Every step writes one such chunk per stream (text so far, no finish reason, usage when
    continuous), so the constant parts (id, object, created, model, the choice's nulls) are encoded
    once per stream; only the text and the token counts are encoded per chunk.
    """

    def __init__(self, base: dict[str, Any], *, chat: bool) -> None:
        head = json.dumps(base, separators=(",", ":"))[:-1]
        if chat:
            self._head = f'data: {head},"choices":[{{"index":0,"delta":{{"content":'.encode()
            self._tail = b'},"logprobs":null,"finish_reason":null}]'
        else:
            self._head = f'data: {head},"choices":[{{"index":0,"text":'.encode()
            self._tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]'

    def content(self, text: str, usage_counts: tuple[int, int] | None = None) -> bytes:
        """The chunk for ``text``; ``usage_counts`` (prompt, completion tokens) adds the usage object."""
        body = self._head + json.dumps(text).encode() + self._tail
        if usage_counts is None:
            return body + b"}\n\n"
        prompt, completion = usage_counts
        return body + (f',"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},'
                       f'"completion_tokens":{completion}}}}}\n\n').encode()


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}
