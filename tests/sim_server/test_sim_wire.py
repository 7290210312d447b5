"""Wire format of every endpoint against the vLLM 0.33 reference, over real sockets."""

from __future__ import annotations

import json

from .conftest import SimProcess
from .sse import chunks, get, post_json, post_stream

K = 3
CHAT = {"messages": [{"role": "user", "content": "Tell me about foxes."}], "max_tokens": 24, "ignore_eos": True}
USAGE = {"stream_options": {"include_usage": True}, "return_token_ids": True}


async def test_health_version_models(sim_plain: SimProcess) -> None:
    status, body = await get(sim_plain.url + "/health")
    assert (status, body) == (200, "")
    status, body = await get(sim_plain.url + "/version")
    assert status == 200 and json.loads(body)["version"] == "0.33.0"
    status, body = await get(sim_plain.url + "/v1/models")
    models = json.loads(body)
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["plain-8b", "alias"]
    card = models["data"][0]
    assert card["object"] == "model" and card["root"] == "sim-8b"
    assert "simulated" in card["owned_by"]
    assert card["max_model_len"] > 0


async def test_streaming_chat_shape(sim: SimProcess) -> None:
    events = await post_stream(sim.url + "/v1/chat/completions", {**CHAT, **USAGE})
    parsed = chunks(events)
    role, *content, tail = parsed
    assert role["object"] == "chat.completion.chunk"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["prompt_token_ids"]
    assert all(c["id"] == role["id"] and c["object"] == "chat.completion.chunk" for c in content)
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    last = content[-1]["choices"][0]
    assert last["finish_reason"] == "length" and "stop_reason" in last
    n_ids = sum(len(c["choices"][0]["token_ids"]) for c in content)
    assert tail["choices"] == [] and tail["usage"]["completion_tokens"] == n_ids == 24
    assert tail["usage"]["prompt_tokens"] == len(role["prompt_token_ids"])
    assert tail["usage"]["total_tokens"] == tail["usage"]["prompt_tokens"] + n_ids
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text) > 0
    # one chunk per engine step: a verify step yields at most k+1 tokens
    assert all(1 <= len(c["choices"][0]["token_ids"]) <= K + 1 for c in content)
    m = tail["metrics"]
    for key in ("queue_time_ms", "time_to_first_token_ms", "generation_time_ms", "mean_itl_ms", "tokens_per_second"):
        assert m[key] >= 0, key
    assert abs(m["mean_itl_ms"] - m["generation_time_ms"] / (n_ids - 1)) < 1e-6
    sd = m["speculative_decoding"]
    assert sd["num_spec_tokens"] == K and len(sd["acceptance_histogram"]) == K + 1
    assert sum(sd["acceptance_histogram"]) == sd["num_spec_steps"] == len(sd["per_step_accepted"])
    assert sum(sd["per_step_accepted"]) == sd["num_accepted_draft_tokens"]
    assert sum(sd["per_step_drafted"]) == sd["num_draft_tokens"]
    assert abs(sd["mean_acceptance_length"] - (1 + sd["num_accepted_draft_tokens"] / sd["num_spec_steps"])) < 1e-9
    # every step after the first (prefill) carries its own chunk; those with drafts are spec steps
    assert sd["num_spec_steps"] <= len(content) - 1


async def test_streaming_completion_shape(sim: SimProcess) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 12, "ignore_eos": True, **USAGE,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    parsed = chunks(await post_stream(sim.url + "/v1/completions", body))
    *content, tail = parsed
    first = content[0]["choices"][0]
    assert content[0]["object"] == "text_completion"
    assert first["prompt_token_ids"] and first["logprobs"] is None
    assert all("prompt_token_ids" not in c["choices"][0] for c in content[1:])
    running = 0
    for c in content:
        running += len(c["choices"][0]["token_ids"])
        assert c["usage"]["completion_tokens"] == running
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert tail["usage"]["completion_tokens"] == running == 12


async def test_usage_chunk_only_when_asked(sim_plain: SimProcess) -> None:
    parsed = chunks(await post_stream(sim_plain.url + "/v1/completions",
                                      {"prompt": "Hello", "max_tokens": 5, "model": "alias"}))
    assert all(c["choices"] for c in parsed)
    assert all("usage" not in c and "token_ids" not in c["choices"][0] for c in parsed)
    parsed = chunks(await post_stream(sim_plain.url + "/v1/completions",
                                      {"prompt": "Hello", "max_tokens": 5, "stream_options": {"include_usage": True}}))
    assert parsed[-1]["choices"] == [] and "metrics" not in parsed[-1]  # no per-request metrics flag


async def test_non_streaming_chat_and_completion(sim: SimProcess) -> None:
    status, body = await post_json(sim.url + "/v1/chat/completions", {**CHAT, "return_token_ids": True})
    assert status == 200
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] == 24
    assert body["prompt_token_ids"] and "speculative_decoding" in body["metrics"]
    status, body = await post_json(sim.url + "/v1/completions", {"prompt": "abc", "max_tokens": 4, "ignore_eos": True})
    assert status == 200 and body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] == 4 and body["choices"][0]["text"]


async def test_stop_string_truncates_text(sim: SimProcess) -> None:
    status, full = await post_json(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 30, "temperature": 0, "ignore_eos": True})
    assert status == 200
    text = full["choices"][0]["text"]
    stop = text[10:13]
    status, body = await post_json(sim.url + "/v1/completions",
                                   {"prompt": "x", "max_tokens": 30, "temperature": 0, "ignore_eos": True, "stop": [stop]})
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert choice["text"] == text[: text.index(stop)]
    parsed = chunks(await post_stream(sim.url + "/v1/completions",
                                      {"prompt": "x", "max_tokens": 30, "temperature": 0, "ignore_eos": True, "stop": stop}))
    assert "".join(c["choices"][0]["text"] for c in parsed) == text[: text.index(stop)]
    assert parsed[-1]["choices"][0]["finish_reason"] == "stop"


async def test_error_objects(sim: SimProcess) -> None:
    status, body = await post_json(sim.url + "/v1/completions", {"prompt": "a", "min_p": 0.1})
    assert status == 400
    assert body["error"]["message"] == ("The min_p and logit_bias sampling parameters are not yet "
                                        "supported with speculative decoding.")
    assert body["error"]["type"] == "BadRequestError" and body["error"]["code"] == 400
    status, body = await post_json(sim.url + "/v1/completions", {"prompt": "a", "logit_bias": {"5": 1}})
    assert status == 400
    status, body = await post_json(sim.url + "/v1/completions", {"prompt": "a", "model": "nope"})
    assert status == 404 and body["error"]["message"] == "The model `nope` does not exist."
    status, body = await post_json(sim.url + "/v1/completions", {"prompt": "a", "max_tokens": 10**9})
    assert status == 400 and "maximum context length" in body["error"]["message"]
    status, body = await post_json(sim.url + "/v1/chat/completions", {"messages": []})
    assert status == 400 and body["error"]["param"] == "messages"


async def test_structured_outputs_accepted(sim: SimProcess) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for extra in ({"structured_outputs": {"json": schema}},
                  {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
                  {"response_format": {"type": "json_object"}}):
        status, body = await post_json(sim.url + "/v1/completions", {"prompt": "a", "max_tokens": 3, **extra})
        assert status == 200, body
    status, body = await post_json(sim.url + "/v1/completions",
                                   {"prompt": "a", "structured_outputs": {"regex": "a+", "json": schema}})
    assert status == 400


async def test_stream_interval_batches_tokens(sim: SimProcess) -> None:
    body = {"prompt": "Hi", "max_tokens": 30, "stream_interval": 6, "return_token_ids": True, "ignore_eos": True}
    parsed = chunks(await post_stream(sim.url + "/v1/completions", body))
    sizes = [len(c["choices"][0]["token_ids"]) for c in parsed]
    assert sum(sizes) == 30
    assert all(n >= 6 for n in sizes[1:-1])  # first and final chunks go out at once
