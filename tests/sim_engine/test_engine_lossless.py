"""Greedy speculative decoding is token-identical to greedy plain decoding."""

from __future__ import annotations

import pytest

from speclab.sim.api import EngineConfig, SpecConfig

from .helpers import bundled_items, run_prompts

SPECS = [
    SpecConfig("draft_model", 4, "sim-1b"),
    SpecConfig("draft_model", 3, "sim-0.5b"),
    SpecConfig("ngram", 5, prompt_lookup_min=2, prompt_lookup_max=4),
    SpecConfig("draft_model", 4, "sim-1b-misaligned"),
]


@pytest.fixture(scope="module")
def baseline() -> dict[str, list[int]]:
    return run_prompts(EngineConfig("sim-8b"), bundled_items()).tokens


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.method}-{s.model}")
def test_greedy_speculation_is_lossless(baseline: dict[str, list[int]], spec: SpecConfig) -> None:
    run = run_prompts(EngineConfig("sim-8b", speculative=spec), bundled_items())
    assert run.tokens.keys() == baseline.keys()
    for rid, tokens in baseline.items():
        assert run.tokens[rid] == tokens, rid
    drafted = sum(f.spec.drafted for f in run.finished.values() if f.spec)
    assert drafted > 0


def test_lossless_with_small_batches_and_chunking() -> None:
    items = bundled_items()[::3]
    base = run_prompts(EngineConfig("sim-8b", max_num_seqs=3, max_num_batched_tokens=48), items)
    spec = run_prompts(EngineConfig("sim-8b", max_num_seqs=3, max_num_batched_tokens=48,
                                    speculative=SpecConfig("draft_model", 5, "sim-1b")), items)
    assert spec.tokens == base.tokens
