"""Structured outputs over HTTP: simulator processes serve constrained answers as vLLM 0.33 does.

The official openai client's ``response_format`` bodies (recorded in ``data/``) succeed; many
concurrent constrained requests on the plain and the speculative server all validate and finish
with ``stop``; bad constraints get vLLM's 400; the two structured-output faults break the answer
on the speculative server only, both with HTTP 200.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.sim_grammar.cases import Case, all_cases

from .conftest import SPEC_ARGS, SimProcess, start_sim
from .sse import chunks, post_json, post_stream

RECORDED = json.loads((Path(__file__).parent / "data" / "openai_response_format.json").read_text())
OPEN_ENDED = ("extra0", "extra1", "extra3", "regex3", "grammar0")  # values the model may leave open (max_tokens)
TOOL_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
                                                "arguments": {"type": "object", "properties": {
                                                    "city": {"type": "string", "maxLength": 20}},
                                                    "required": ["city"], "additionalProperties": False}},
               "required": ["name", "arguments"], "additionalProperties": False}
TOOL_BODY = {"messages": [{"role": "user", "content": "Call get_weather for Oslo. Answer with JSON only."}],
             "max_tokens": 150, "temperature": 0,
             "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": TOOL_SCHEMA}}}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    proc = start_sim(["sim-8b"], tmp_path_factory.mktemp("plain"), "plain")
    yield proc
    proc.stop()


def _schema_of(body: dict[str, Any]) -> dict[str, Any]:
    rf = body["response_format"]
    return rf["json_schema"]["schema"] if rf["type"] == "json_schema" else {"type": "object"}


@pytest.mark.parametrize("index", range(len(RECORDED["requests"])))
async def test_the_openai_clients_response_format_requests_succeed(sim: SimProcess, index: int) -> None:
    recorded = RECORDED["requests"][index]
    status, body = await post_json(sim.url + recorded["path"], recorded["body"])
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), _schema_of(recorded["body"]))


async def _constrained(server: SimProcess, cases: list[Case], n: int) -> list[str]:
    async def one(i: int) -> str | None:
        case = cases[i % len(cases)]
        body = {"prompt": f"Request {i}: answer in the required format.", "max_tokens": 300,
                "temperature": i % 2, "seed": i, **case.body}
        status, out = await post_json(server.url + "/v1/completions", body)
        if status != 200:
            return f"{case.name}-{i}: HTTP {status} {out}"
        choice = out["choices"][0]
        if choice["finish_reason"] != "stop" or not case.check(choice["text"]):
            return f"{case.name}-{i} ({choice['finish_reason']}): {choice['text'][:100]!r}"
        return None
    results = await asyncio.gather(*(one(i) for i in range(n)))
    return [r for r in results if r is not None]


@pytest.mark.parametrize("server", ["plain", "sim"])
async def test_concurrent_constrained_requests_all_validate(server: str, request: pytest.FixtureRequest) -> None:
    proc: SimProcess = request.getfixturevalue(server)
    cases = [c for c in all_cases() if c.name not in OPEN_ENDED]
    assert await _constrained(proc, cases, 120) == []


async def test_a_streamed_constrained_answer_is_valid_and_ends_with_stop(sim: SimProcess) -> None:
    events = await post_stream(sim.url + "/v1/chat/completions", {**TOOL_BODY, "stream": True})
    parts = chunks(events)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in parts if c["choices"])
    jsonschema.validate(json.loads(text), TOOL_SCHEMA)
    assert [c["choices"][0]["finish_reason"] for c in parts if c["choices"]][-1] == "stop"


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"response_format": {"type": "json_schema"}}, "response_format", "'json_schema' field must be provided"),
    ({"structured_outputs": {"choice": []}}, None, "cannot be an empty list"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, None, "one kind of constraints"),
    ({"structured_outputs": {"json": {"type": "nope"}}}, None, "Grammar error|Invalid grammar"),
])
async def test_bad_constraints_get_vllms_400(sim: SimProcess, body: dict[str, Any], param: str | None,
                                             needle: str) -> None:
    unconstrained = {k: v for k, v in TOOL_BODY.items() if k != "response_format"}
    status, out = await post_json(sim.url + "/v1/chat/completions", {**unconstrained, **body})
    assert status == 400 and out["error"]["param"] == param
    assert re.search(needle, out["error"]["message"]), out


async def test_runaway_answers_http_200_with_trailing_whitespace_to_max_tokens(tmp_path: Path) -> None:
    spec = start_sim(["sim-8b", *SPEC_ARGS, "--sim-fault", "runaway=1"], tmp_path, "runaway")
    try:
        status, out = await post_json(spec.url + "/v1/chat/completions", TOOL_BODY)
        assert status == 200
        choice = out["choices"][0]
        assert choice["finish_reason"] == "length" and out["usage"]["completion_tokens"] == TOOL_BODY["max_tokens"]
        content = choice["message"]["content"]
        assert content.endswith("   ")
        jsonschema.validate(json.loads(content), TOOL_SCHEMA)
    finally:
        assert spec.stop() == 0


async def test_json_corruption_breaks_speculative_answers_and_leaves_plain_ones(tmp_path: Path) -> None:
    fault = ["--sim-fault", "json_corruption=1"]
    spec = start_sim(["sim-8b", *SPEC_ARGS, *fault], tmp_path, "corrupt-spec")
    base = start_sim(["sim-8b", *fault], tmp_path, "corrupt-plain")
    try:
        case = Case("tool", {"response_format": TOOL_BODY["response_format"]},
                    lambda text: jsonschema.Draft202012Validator(TOOL_SCHEMA).is_valid(_loads(text)))
        assert await _constrained(base, [case], 12) == []
        assert len(await _constrained(spec, [case], 12)) >= 6
    finally:
        spec.stop()
        base.stop()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
