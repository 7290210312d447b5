"""Request parsing, detokenisation with stop strings, and the per-request metrics object."""

from __future__ import annotations

from typing import Any

import pytest

from speclab.sim.api import RequestSpecStats, RequestTimes
from speclab.sim.serve_protocol import IncrementalDetokenizer, RequestError, parse_request, request_metrics

from .fake_engine import ByteTokenizer

TOK = ByteTokenizer()


def parse(body: dict[str, Any], *, chat: bool = False, spec: bool = False, force: bool = False) -> Any:
    return parse_request(body, chat=chat, tokenizer=TOK, max_model_len=100, speculative=spec,
                         server_stream_interval=2, force_usage=force)


def test_defaults_and_mapping() -> None:
    p = parse({"prompt": "hi"})
    assert p.sampling.max_tokens == 16 and p.sampling.temperature == 1.0 and p.stream_interval == 2
    c = parse({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, chat=True)
    assert c.sampling.max_tokens == 100 - len(c.prompt_ids)
    assert TOK.decode(c.prompt_ids) == TOK.apply_chat_template([{"role": "user", "content": "hi"}])
    f = parse({"prompt": "hi", "stream": True}, force=True)
    assert f.include_usage and f.continuous_usage
    s = parse({"prompt": [1, 2, 3], "stream": True, "stream_interval": 5, "stop": "x", "seed": 3,
               "stream_options": {"include_usage": True}, "structured_outputs": {"json": '{"type": "object"}'}})
    assert s.prompt_ids == [1, 2, 3] and s.stream_interval == 5 and s.sampling.stop == ["x"]
    assert s.include_usage and not s.continuous_usage and s.sampling.structured is not None
    assert s.sampling.structured.schema == {"type": "object"}
    assert parse({"prompt": "a", "guided_json": {}}).warnings


@pytest.mark.parametrize(("body", "needle"), [
    ({"prompt": "a", "min_p": 0.2}, "min_p and logit_bias"),
    ({"prompt": "a", "max_tokens": 100}, "too large"),
    ({"prompt": "a" * 100}, "maximum context length"),
    ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream=True"),
    ({"prompt": "a", "n": 2}, "n=1"),
    ({"prompt": "a", "seed": "x"}, "seed"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "a", "structured_outputs": {"choice": []}}, "cannot be an empty list"),
    ({"prompt": "a", "structured_outputs": {"regex": "("}}, "Grammar error|Invalid grammar"),
])
def test_rejections(body: dict[str, Any], needle: str) -> None:
    with pytest.raises(RequestError, match=needle):
        parse(body, spec=True)


def test_sampling_fields_the_models_ignore_are_warned_and_neutral_values_are_not() -> None:
    warned = parse({"prompt": "a", "logprobs": 0, "presence_penalty": 1.5, "min_p": 0.1, "logit_bias": {"5": 3},
                    "min_tokens": 4}).warnings
    assert [w.split("=")[0] for w in warned] == ["logprobs", "presence_penalty", "min_tokens", "min_p", "logit_bias"]
    assert all("not modelled by speclab-sim" in w for w in warned)
    neutral = {"logprobs": False, "top_logprobs": 0, "presence_penalty": 0, "repetition_penalty": 1.0,
               "logit_bias": {}, "prompt_logprobs": None, "min_p": 0.0}
    assert parse({"prompt": "a", **neutral}).warnings == []


def test_priority_needs_the_priority_policy_as_in_vllm() -> None:
    with pytest.raises(RequestError) as info:
        parse({"prompt": "a", "priority": 3})
    assert info.value.body()["error"]["message"] == "Got priority 3 but Priority scheduling is not enabled."
    assert parse({"prompt": "a", "priority": 0}).priority == 0
    assert parse_request({"prompt": "a", "priority": -2}, chat=False, tokenizer=TOK, max_model_len=100,
                         speculative=False, server_stream_interval=1, force_usage=False,
                         priority_scheduling=True).priority == -2


def test_structured_refusals_carry_vllms_param_and_ignored_keys_are_warned() -> None:
    with pytest.raises(RequestError) as info:
        parse({"prompt": "a", "response_format": {"type": "json_schema"}})
    assert info.value.param == "response_format" and "'json_schema' field must be provided" in str(info.value)
    ok = parse({"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}, "strict": True}}})
    assert ok.sampling.structured is not None and ok.sampling.structured.kind == "json"
    assert ok.warnings == ["response_format.json_schema.strict is accepted but not acted on by vLLM 0.33"]


def test_detokenizer_holds_back_and_truncates_at_stop() -> None:
    d = IncrementalDetokenizer(TOK, TOK.encode("p"), stop=["END"], include_stop=False)
    assert d.add(TOK.encode("abc")) == "a"  # "bc" could start "END"
    assert d.add(TOK.encode("dE")) == "bc"
    assert d.add(TOK.encode("NDzz")) == "d" and d.stop_hit == "END"
    assert d.text == "abcd" and d.flush() == ""
    multi = IncrementalDetokenizer(TOK, [], stop=[], include_stop=False)
    euro = TOK.encode("€")
    assert multi.add(euro[:1]) == "" and multi.add(euro[1:]) == "€"  # incomplete UTF-8 waits


def test_request_metrics_flags() -> None:
    times = RequestTimes(queued=1.0, scheduled=1.5, first_token=1.6, last_token=2.6)
    spec = RequestSpecStats(num_spec_tokens=2, steps=4, drafted=8, accepted=6, histogram=[0, 2, 2],
                            per_step_accepted=[1, 1, 2, 2], per_step_drafted=[2, 2, 2, 2])
    m = request_metrics(times, spec, 11, timing=True, spec_mode="summary")
    assert m is not None
    assert m["queue_time_ms"] == pytest.approx(500) and m["time_to_first_token_ms"] == pytest.approx(100)
    assert m["generation_time_ms"] == pytest.approx(1000) and m["mean_itl_ms"] == pytest.approx(100)
    assert m["tokens_per_second"] == pytest.approx(11 / 1.1)
    sd = m["speculative_decoding"]
    assert sd["mean_acceptance_length"] == 2.5 and sd["draft_acceptance_rate"] == 0.75
    assert "per_step_accepted" not in sd
    only_spec = request_metrics(times, spec, 11, timing=False, spec_mode="detailed")
    assert only_spec is not None and set(only_spec) == {"speculative_decoding"}
    assert only_spec["speculative_decoding"]["per_step_drafted"] == [2, 2, 2, 2]
    assert request_metrics(times, None, 11, timing=False, spec_mode="summary") is None
