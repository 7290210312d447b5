"""Structured outputs in the engine: 1,000 constrained requests per path, the grammar's drafts, the faults.

Each answer is judged by the case's own oracle (jsonschema, ``re.fullmatch``, membership), not by
llguidance, over the bundled prompts at temperatures 0 and 1, on the plain path and under a draft
model, n-gram lookup and an EAGLE head.
"""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import pytest

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.grammar import spec_from_request
from tests.sim_grammar.cases import Case, all_cases

from .helpers import CLASSES, PROMPTS, Run, load_lines, run_prompts

DRAFT = SpecConfig("draft_model", 4, "sim-1b")
PATHS = {"plain": None, "draft": DRAFT, "ngram": SpecConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4)}
Item = tuple[str, list[dict[str, str]], SamplingParams]
# Constraints whose values the model can leave open (unbounded numbers and strings, flexible whitespace,
# additional properties, an open-ended grammar) run to max_tokens on both paths, as under vLLM.
OPEN_ENDED = ("extra0", "extra1", "extra3", "regex3", "grammar0")


@cache
def _closed_cases() -> list[Case]:
    return [c for c in all_cases() if c.name not in OPEN_ENDED]


@cache
def _prompts() -> list[list[dict[str, str]]]:
    return [line["messages"] for cls in CLASSES for line in load_lines(PROMPTS, cls)]


def _items(n: int) -> tuple[list[Item], dict[str, Case]]:
    cases, prompts = _closed_cases(), _prompts()
    items: list[Item] = []
    judge: dict[str, Case] = {}
    for i in range(n):
        case = cases[i % len(cases)]
        spec = spec_from_request(case.body, chat=True)
        rid = f"{case.name}-{i}"
        params = SamplingParams(max_tokens=400, temperature=(i // len(cases)) % 2, seed=i, structured=spec)
        items.append((rid, prompts[(i * 7) % len(prompts)], params))
        judge[rid] = case
    return items, judge


def _failures(run: Run, judge: dict[str, Case]) -> list[str]:
    out = []
    for rid, case in judge.items():
        text, finished = run.text(rid), run.finished[rid]
        if finished.finish_reason != "stop" or not case.check(text):
            out.append(f"{rid} ({finished.finish_reason}): {text[:120]!r}")
    return out


@pytest.mark.parametrize("path", ["plain", "draft"])
def test_a_thousand_constrained_answers_are_all_valid(path: str) -> None:
    items, judge = _items(1000)
    run = run_prompts(EngineConfig("sim-8b", speculative=PATHS[path], seed=3), items)
    assert _failures(run, judge) == []
    if path != "plain":
        drafted = sum(f.spec.drafted for f in run.finished.values() if f.spec is not None)
        accepted = sum(f.spec.accepted for f in run.finished.values() if f.spec is not None)
        assert drafted and accepted / drafted > 0.3


def test_ngram_and_head_drafts_are_cut_to_what_the_grammar_takes() -> None:
    items, judge = _items(120)
    for spec in (PATHS["ngram"], SpecConfig("eagle", 3, "h")):
        run = run_prompts(EngineConfig("sim-8b", speculative=spec), items)
        assert _failures(run, judge) == []


def test_greedy_constrained_output_is_the_same_on_both_paths() -> None:
    items, _ = _items(len(_closed_cases()))
    plain = run_prompts(EngineConfig("sim-8b"), items)
    spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT), items)
    assert plain.tokens == spec.tokens


def test_open_ended_constraints_run_to_max_tokens_on_the_plain_path_too() -> None:
    cases = [c for c in all_cases() if c.name in OPEN_ENDED]
    items = [(f"{c.name}-{i}", _prompts()[i], SamplingParams(max_tokens=60, temperature=1.0, seed=i,
                                                           structured=spec_from_request(c.body, chat=True)))
             for i in range(4) for c in cases]
    run = run_prompts(EngineConfig("sim-8b"), items)
    truncated = [rid for rid, out in run.finished.items() if out.finish_reason == "length"]
    assert truncated
    assert all(len(run.tokens[rid]) == 60 for rid in truncated)


def _tool_items() -> tuple[list[Item], dict[str, dict[str, object]]]:
    items: list[Item] = []
    schemas: dict[str, dict[str, object]] = {}
    for i, line in enumerate(load_lines(PROMPTS, "tool_call")):
        spec = spec_from_request({"structured_outputs": {"json": line["schema"]}}, chat=True)
        items.append((f"t{i}", line["messages"], SamplingParams(max_tokens=120, temperature=0.0, structured=spec)))
        schemas[f"t{i}"] = line["schema"]
    return items, schemas


def _valid(text: str, schema: dict[str, object]) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_json_corruption_breaks_the_constraint_on_the_speculative_path_only() -> None:
    items, schemas = _tool_items()
    faults = {"json_corruption": 0.3}
    base = run_prompts(EngineConfig("sim-8b", faults=faults), items)
    spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT, faults=faults), items)
    assert all(_valid(base.text(r), s) for r, s in schemas.items())
    assert sum(not _valid(spec.text(r), s) for r, s in schemas.items()) >= len(items) // 4


def test_runaway_pads_a_valid_value_with_whitespace_until_max_tokens() -> None:
    items, schemas = _tool_items()
    base = run_prompts(EngineConfig("sim-8b", faults={"runaway": 1.0}), items)
    spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT, faults={"runaway": 1.0}), items)
    for rid, schema in schemas.items():
        assert base.finished[rid].finish_reason == "stop"
        out = spec.finished[rid]
        assert out.finish_reason == "length" and len(spec.tokens[rid]) == 120
        text = spec.text(rid)
        assert text.rstrip() == base.text(rid).rstrip() and text.endswith("  ") and _valid(text, schema)


def test_a_completed_value_ends_with_eos_and_ignore_eos_runs_on() -> None:
    items, _ = _tool_items()
    rid, messages, params = items[0]
    params.ignore_eos = True
    run = run_prompts(EngineConfig("sim-8b", speculative=DRAFT), [(rid, messages, params)])
    assert run.finished[rid].finish_reason == "length" and len(run.tokens[rid]) == params.max_tokens
