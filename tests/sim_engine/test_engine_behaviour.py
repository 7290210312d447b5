"""Class-dependent acceptance, engine faults, seeds, stop rules, golden set and start-up time."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from speclab.sim.api import EngineConfig, RequestOutput, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine

from .helpers import CLASSES, GOLDEN, Run, add, bundled_items, drain, load_lines, run_prompts

DRAFT = SpecConfig("draft_model", 4, "sim-1b")
REFUSAL = re.compile(r"\b(I can't|I cannot|I won't|I'm sorry)\b")


def _acceptance(run_finished: dict[str, RequestOutput], prefix: str) -> float:
    specs = [f.spec for rid, f in run_finished.items() if rid.startswith(prefix) and f.spec is not None]
    return sum(s.accepted for s in specs) / sum(s.drafted for s in specs)


@pytest.fixture(scope="module")
def greedy_spec_run() -> Run:
    return run_prompts(EngineConfig("sim-8b", speculative=DRAFT), bundled_items())


def test_acceptance_depends_on_the_prompt_class(greedy_spec_run: Run) -> None:
    rates = {cls: _acceptance(greedy_spec_run.finished, cls) for cls in CLASSES}
    assert rates["refusal"] > rates["long_continuation"] + 0.1
    assert rates["tool_call"] > rates["long_continuation"]
    for out in greedy_spec_run.finished.values():
        spec = out.spec
        assert spec is not None
        assert sum(spec.histogram) == spec.steps == len(spec.per_step_accepted)
        assert sum(spec.per_step_accepted) == spec.accepted <= spec.drafted


def test_step_stats_reconcile_with_per_request_counts(greedy_spec_run: Run) -> None:
    stats = greedy_spec_run.stats
    finished = greedy_spec_run.finished.values()
    specs = [f.spec for f in finished if f.spec is not None]
    assert sum(s.spec_accepted for s in stats) == sum(f.accepted for f in specs)
    assert sum(s.spec_draft_tokens for s in stats) == sum(f.drafted for f in specs)
    assert sum(s.spec_drafts for s in stats) == sum(f.steps for f in specs)
    per_pos = [sum(s.spec_accepted_per_pos[i] for s in stats) for i in range(DRAFT.num_speculative_tokens)]
    assert per_pos[0] >= per_pos[1] >= per_pos[2] >= per_pos[3] > 0
    assert sum(per_pos) == sum(s.spec_accepted for s in stats)
    assert sum(s.generation_tokens for s in stats) == sum(len(t) for t in greedy_spec_run.tokens.values())


def test_misaligned_draft_drops_acceptance_but_stays_correct(greedy_spec_run: Run) -> None:
    run = run_prompts(EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b-misaligned")),
                      bundled_items())
    assert run.tokens == greedy_spec_run.tokens
    aligned = _acceptance(greedy_spec_run.finished, "")
    assert _acceptance(run.finished, "") < 0.8 * aligned


def test_lossy_verifier_breaks_greedy_equivalence(greedy_spec_run: Run) -> None:
    run = run_prompts(EngineConfig("sim-8b", speculative=DRAFT, faults={"lossy_verifier": 0.5}), bundled_items())
    differing = sum(run.tokens[r] != t for r, t in greedy_spec_run.tokens.items())
    assert differing >= 5
    assert _acceptance(run.finished, "") > _acceptance(greedy_spec_run.finished, "")


def test_sampling_drift_leaves_the_baseline_untouched() -> None:
    items = [(r, m, SamplingParams(max_tokens=p.max_tokens, temperature=0.8, seed=i))
             for i, (r, m, p) in enumerate(bundled_items()[::4])]
    clean = run_prompts(EngineConfig("sim-8b"), items)
    drifted = run_prompts(EngineConfig("sim-8b", faults={"sampling_drift": 0.6}), items)
    assert clean.tokens == drifted.tokens


@pytest.mark.parametrize("spec", [None, DRAFT], ids=["baseline", "draft"])
def test_same_seed_same_output_whatever_the_batch(spec: SpecConfig | None) -> None:
    messages = [{"role": "user", "content": "Continue the story: Oren was a farmer who lived in a mountain pass."}]
    params = SamplingParams(max_tokens=48, temperature=1.0, top_k=50, seed=42)
    alone = run_prompts(EngineConfig("sim-8b", speculative=spec), [("x", messages, params)])
    crowd = [(f"o{i}", m, SamplingParams(max_tokens=30, temperature=1.0)) for i, (_, m, _) in
             enumerate(bundled_items()[:12])]
    busy = run_prompts(EngineConfig("sim-8b", speculative=spec, max_num_seqs=5), [*crowd[:6], ("x", messages, params),
                                                                                    *crowd[6:]])
    assert busy.tokens["x"] == alone.tokens["x"]
    other = run_prompts(EngineConfig("sim-8b", speculative=spec),
                        [("x", messages, SamplingParams(max_tokens=48, temperature=1.0, top_k=50, seed=43))])
    assert other.tokens["x"] != alone.tokens["x"]


def test_stop_rules() -> None:
    engine = build_engine(EngineConfig("sim-8b", speculative=DRAFT))
    q = [{"role": "user", "content": "What is the capital of France?"}]
    add(engine, "eos", q, SamplingParams(max_tokens=30, temperature=0))
    add(engine, "str", q, SamplingParams(max_tokens=30, temperature=0, stop=[" is"]))
    add(engine, "len", q, SamplingParams(max_tokens=3, temperature=0))
    add(engine, "ign", q, SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))
    ids = engine.tokenizer.encode("The capital of France")
    add(engine, "tid", q, SamplingParams(max_tokens=30, temperature=0, stop_token_ids=[ids[-1]]))
    run = drain(engine)
    f = run.finished
    assert (f["eos"].finish_reason, f["eos"].stop_reason) == ("stop", None)
    assert run.tokens["eos"][-1] == engine.tokenizer.eos_token_id
    assert run.text("eos") == "The capital of France is Paris."
    assert (f["str"].finish_reason, f["str"].stop_reason) == ("stop", " is")
    assert run.text("str") == "The capital of France is"
    assert (f["len"].finish_reason, len(run.tokens["len"])) == ("length", 3)
    assert (f["ign"].finish_reason, len(run.tokens["ign"])) == ("length", 20)
    assert (f["tid"].finish_reason, f["tid"].stop_reason) == ("stop", ids[-1])
    assert run.tokens["tid"] == ids


def _passes(check: dict[str, Any], text: str, baseline: str) -> bool:
    kind = check["kind"]
    if kind == "contains":
        return check["value"].lower() in text.lower() if check.get("ignore_case") else check["value"] in text
    if kind == "regex":
        return re.search(check["pattern"], text) is not None
    if kind == "exact":
        return text.strip() == check["value"]
    if kind == "refusal":
        return REFUSAL.search(text) is not None
    if kind == "json_schema":
        try:
            jsonschema.validate(json.loads(text), check["schema"])
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    return kind == "baseline_equal" and text == baseline


@pytest.mark.parametrize("model", ["sim-8b", "sim-70b"])
def test_greedy_target_passes_every_golden_case(model: str) -> None:
    cases = [case for cls in CLASSES for case in load_lines(GOLDEN, cls)]
    assert len(cases) >= 20
    items = [(c["id"], c["messages"], SamplingParams(max_tokens=c["max_tokens"], temperature=0)) for c in cases]
    tp = 4 if model == "sim-70b" else 1
    base = run_prompts(EngineConfig(model, tensor_parallel_size=tp), items)
    spec = run_prompts(EngineConfig(model, tensor_parallel_size=tp, speculative=DRAFT), items)
    for case in cases:
        text = spec.text(case["id"])
        assert _passes(case["check"], text, base.text(case["id"])), (case["id"], text)
        assert _passes(case["check"], base.text(case["id"]), base.text(case["id"])), case["id"]
