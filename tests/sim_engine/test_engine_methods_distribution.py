"""Sampled output of every lossless method is distributed as the target's; the lossy ones are caught.

The same exact checks as ``test_engine_high_temperature`` (first-3-token chi-square against the
target's probabilities, a randomized PIT of every verified position, the log-likelihood z-score),
over thousands of seeded requests through the real engine, for block verification with greedy and
probabilistic drafts, probabilistic standard verification, the heads, n-gram and suffix drafts.
"""

from __future__ import annotations

import pytest

from speclab.sim.api import SamplingParams, SpecConfig

from .test_engine_high_temperature import N, Oracle, essay_prompt, judge, outputs

CASES = {  # answer start, speculative config, sampling
    "block-probabilistic-k4": ("Rivers are", SpecConfig("draft_model", 4, "sim-1b", rejection_sample_method="block",
                                                        draft_sample_method="probabilistic"),
                               SamplingParams(max_tokens=6, temperature=2.0)),
    "block-greedy-k3-top_p": ("The", SpecConfig("draft_model", 3, "sim-1b", rejection_sample_method="block"),
                              SamplingParams(max_tokens=5, temperature=1.5, top_p=0.9)),
    "standard-probabilistic-k4": ("In the", SpecConfig("draft_model", 4, "sim-1b",
                                                       draft_sample_method="probabilistic"),
                                  SamplingParams(max_tokens=6, temperature=2.0)),
    "eagle3-probabilistic-block": ("Rivers", SpecConfig("eagle3", 4, "h", rejection_sample_method="block",
                                                        draft_sample_method="probabilistic"),
                                   SamplingParams(max_tokens=6, temperature=1.5, top_k=50)),
    "mtp-greedy-k2": ("A river", SpecConfig("mtp", 2), SamplingParams(max_tokens=5, temperature=2.0)),
    "eagle-greedy-k3": ("Rivers are", SpecConfig("eagle", 3, "h"), SamplingParams(max_tokens=5, temperature=1.5)),
    "suffix-k4": ("Rivers", SpecConfig("suffix", 4), SamplingParams(max_tokens=6, temperature=1.0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lossless_methods_sample_the_target(case: str) -> None:
    start, spec, params = CASES[case]
    prompt = essay_prompt(start)
    samples = outputs(prompt, spec, params, seed0=40_000)
    verdict = judge(samples, Oracle(prompt, params.temperature, params.top_k, params.top_p), first=1)
    assert verdict.positions > 2 * N
    assert verdict.consistent, verdict


def test_synthetic_acceptance_is_caught_as_lossy() -> None:
    spec = SpecConfig("draft_model", 4, "sim-1b", rejection_sample_method="synthetic",
                      synthetic_acceptance_rates=[0.9, 0.8, 0.7, 0.6])
    params = SamplingParams(max_tokens=6, temperature=2.0)
    prompt = essay_prompt("Rivers are")
    verdict = judge(outputs(prompt, spec, params, seed0=40_000), Oracle(prompt, 2.0, -1, 1.0), first=1)
    assert not verdict.consistent, verdict
