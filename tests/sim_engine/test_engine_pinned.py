"""Seeded runs pinned to the digit: tokens, finish reasons, acceptance counts, step times and step stats.

The engine's hot paths are optimised (caches, fewer array passes); these digests were recorded
before those changes, so any change that alters a token, an acceptance decision, a modelled step
time or a step's statistics shows up here. When a change of behaviour is intended, print the new
digests with ``python -m tests.sim_engine.test_engine_pinned`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.grammar import spec_from_request

from .helpers import CLASSES, PROMPTS, add, drain, load_lines

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["city", "days"], "additionalProperties": False}
GRAMMAR = spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
    "name": "trip", "schema": SCHEMA, "strict": True}}}, chat=True)

CONFIGS: dict[str, EngineConfig] = {
    "plain": EngineConfig("sim-8b"),
    "draft4": EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b")),
    "draft4-probabilistic": EngineConfig("sim-8b", speculative=SpecConfig(
        "draft_model", 4, "sim-1b", draft_sample_method="probabilistic")),
    "draft3-block": EngineConfig("sim-8b", speculative=SpecConfig(
        "draft_model", 3, "sim-1b", rejection_sample_method="block", draft_sample_method="probabilistic")),
    "draft4-fly": EngineConfig("sim-8b", speculative=SpecConfig(
        "draft_model", 4, "sim-1b", rejection_sample_method="fly", fly_window_size=2)),
    "draft4-synthetic": EngineConfig("sim-8b", speculative=SpecConfig(
        "draft_model", 4, "sim-1b", rejection_sample_method="synthetic",
        synthetic_acceptance_rates=[0.8, 0.6, 0.45, 0.3])),
    "draft4-schedule": EngineConfig("sim-8b", max_num_seqs=16, speculative=SpecConfig(
        "draft_model", 4, "sim-1b", per_batch_size=[(1, 4, 4), (5, 16, 2)])),
    "draft4-faults": EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b"),
                                  faults={"lossy_verifier": 0.2, "sampling_drift": 0.3}),
    "draft4-grammar-faults": EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b"),
                                          faults={"json_corruption": 0.3, "runaway": 0.3}),
    "misaligned": EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 3, "sim-1b-misaligned")),
    "eagle3": EngineConfig("sim-8b", speculative=SpecConfig("eagle3", 3)),
    "ngram": EngineConfig("sim-8b", speculative=SpecConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4)),
    "suffix": EngineConfig("sim-8b", speculative=SpecConfig("suffix", 4)),
    "chunked-small": EngineConfig("sim-8b", max_num_batched_tokens=96, max_num_seqs=8,
                                  speculative=SpecConfig("draft_model", 4, "sim-1b")),
}

EXPECTED: dict[str, str] = {
    "chunked-small": "5895bbafb18cd2352a864c5b838784fb",
    "draft3-block": "37dfd8609f4196a91a283ddcf008ecc9",
    "draft4": "228e6f034c5a009979ce56045e2966e5",
    "draft4-faults": "08d1dde70249e911314ba95edaf43fb6",
    "draft4-fly": "7f2f29750d53e998425f9b459fbec4f5",
    "draft4-grammar-faults": "adaec542d1f45aa454e8015e7fd20209",
    "draft4-probabilistic": "e28a50debfe06842ab307317babf5520",
    "draft4-schedule": "7484fe91717b9a361e73ce470e7de376",
    "draft4-synthetic": "562af30842e47aa1615c1a2f771fd6fd",
    "eagle3": "878196d4311a64a6895f7d6ce545bd20",
    "misaligned": "57f5cad7799a6b00fec9f6d50b85b842",
    "ngram": "23a1c3137d9263f91333331b5f3ee860",
    "plain": "6ee1bfcefa9d86b1fcfa71787c349f59",
    "suffix": "e3cc4c317b8c9391101d714667ce5965",
}


def _params(i: int, config: str) -> SamplingParams:
    """A mix of sampling settings; the grammar config constrains every other request."""
    temperature, top_p, top_k = ((0.0, 1.0, -1), (1.0, 1.0, -1), (0.8, 0.9, 50), (0.6, 1.0, 20))[i % 4]
    structured = GRAMMAR if config == "draft4-grammar-faults" and i % 2 == 0 else None
    stop = [" the"] if i % 5 == 3 else []
    return SamplingParams(max_tokens=48, temperature=temperature, top_p=top_p, top_k=top_k,
                          seed=None if i % 3 == 0 else 1000 + i, stop=stop, ignore_eos=i % 4 == 1,
                          structured=structured)


def fingerprint(config: str, n: int = 12) -> tuple[str, dict[str, Any]]:
    """(sha256 over the run, a readable summary) for ``n`` requests arriving over the first steps."""
    engine = build_engine(CONFIGS[config])
    prompts = [line["messages"] for cls in CLASSES for line in load_lines(PROMPTS, cls)]
    for i in range(n // 2):
        add(engine, f"r{i}", prompts[(i * 5) % len(prompts)], _params(i, config))
    run = drain(engine, max_steps=3)
    for i in range(n // 2, n):
        add(engine, f"r{i}", prompts[(i * 5) % len(prompts)], _params(i, config), at=run.clock)
    rest = drain(engine, now=run.clock)
    tokens = {rid: run.tokens.get(rid, []) + rest.tokens.get(rid, []) for rid in sorted({*run.tokens, *rest.tokens})}
    finished = {**run.finished, **rest.finished}
    record = {
        "tokens": tokens,
        "finish": {rid: [o.finish_reason, o.stop_reason] for rid, o in sorted(finished.items())},
        "spec": {rid: None if o.spec is None else [o.spec.steps, o.spec.drafted, o.spec.accepted, o.spec.histogram,
                                                    o.spec.per_step_accepted, o.spec.per_step_drafted]
                 for rid, o in sorted(finished.items())},
        "times": {rid: None if o.times is None else [repr(o.times.queued), repr(o.times.scheduled),
                                                      repr(o.times.first_token), repr(o.times.last_token)]
                  for rid, o in sorted(finished.items())},
        "steps": [[s.iteration_tokens, s.generation_tokens, s.prompt_tokens, s.spec_drafts, s.spec_draft_tokens,
                   s.spec_accepted, s.spec_accepted_per_pos, s.running, s.waiting, repr(s.kv_cache_usage),
                   s.preemptions] for s in run.stats + rest.stats],
        "clock": repr(rest.clock),
    }
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]
    summary = {"requests": len(finished), "tokens": sum(len(t) for t in tokens.values()),
               "accepted": sum(s.spec_accepted for s in run.stats + rest.stats),
               "steps": len(run.stats) + len(rest.stats), "clock": rest.clock}
    return digest, summary


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_seeded_run_is_pinned(config: str) -> None:
    digest, summary = fingerprint(config)
    assert summary["requests"] == 12
    assert digest == EXPECTED[config], f"{config}: {summary}"


if __name__ == "__main__":
    for name in sorted(CONFIGS):
        found, facts = fingerprint(name)
        print(f"    {name!r}: {found!r},  # {facts}")
