"""Greedy speculative decoding is token-identical to greedy plain decoding, for every lossless method.

Every drafter (draft model, misaligned draft, EAGLE / EAGLE-3 / MTP heads, n-gram, suffix) under
every lossless rejection method (standard, block), greedy and probabilistic drafting, and under a
per-batch-size schedule; the lossy methods (synthetic, fly) are shown to change the output.
"""

from __future__ import annotations

import pytest

from speclab.sim.api import EngineConfig, SpecConfig

from .helpers import bundled_items, run_prompts

SCHEDULE = [(1, 2, 4), (3, 32, 2), (33, 1024, 0)]
SPECS = [
    SpecConfig("draft_model", 4, "sim-1b"),
    SpecConfig("draft_model", 3, "sim-0.5b", draft_sample_method="probabilistic"),
    SpecConfig("draft_model", 4, "sim-1b", rejection_sample_method="block"),
    SpecConfig("draft_model", 4, "sim-1b", rejection_sample_method="block", draft_sample_method="probabilistic"),
    SpecConfig("ngram", 5, prompt_lookup_min=2, prompt_lookup_max=4),
    SpecConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4, rejection_sample_method="block"),
    SpecConfig("draft_model", 4, "sim-1b-misaligned"),
    SpecConfig("eagle", 3, "h"),
    SpecConfig("eagle3", 4, "h", rejection_sample_method="block"),
    SpecConfig("mtp", 2),
    SpecConfig("suffix", 6),
    SpecConfig("draft_model", 4, "sim-1b", per_batch_size=SCHEDULE),
]


def _id(spec: SpecConfig) -> str:
    parts = [spec.method, spec.model or "", f"k{spec.num_speculative_tokens}", spec.rejection_sample_method,
             spec.draft_sample_method, "schedule" if spec.per_batch_size else ""]
    return "-".join(p for p in parts if p)


@pytest.fixture(scope="module")
def baseline() -> dict[str, list[int]]:
    return run_prompts(EngineConfig("sim-8b"), bundled_items()).tokens


@pytest.mark.parametrize("spec", SPECS, ids=_id)
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


@pytest.mark.parametrize("spec", [
    SpecConfig("draft_model", 4, "sim-1b", rejection_sample_method="synthetic",
               synthetic_acceptance_rates=[0.9, 0.8, 0.7, 0.6]),
    SpecConfig("eagle3", 4, "h", rejection_sample_method="fly", fly_window_size=1, fly_entropy_threshold=0.0),
], ids=lambda s: s.rejection_sample_method)
def test_lossy_methods_change_greedy_output(baseline: dict[str, list[int]], spec: SpecConfig) -> None:
    run = run_prompts(EngineConfig("sim-8b", speculative=spec), bundled_items())
    differing = [rid for rid, tokens in baseline.items() if run.tokens[rid] != tokens]
    assert len(differing) >= 3, differing
