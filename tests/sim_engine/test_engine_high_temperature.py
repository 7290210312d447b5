"""At T = 2 and under top-p / top-k the speculative engine samples exactly the target's distribution.

Thousands of requests with distinct seeds run through the real engine; their outputs are checked
against probabilities computed exactly from the target model (not against a second sample):
a chi-square over the first-3-token sequences (rare sequences pooled), a randomized PIT of every
speculated position (Kolmogorov-Smirnov against uniform) and the log-likelihood z-score. The
same checks on the plain engine, and on a deliberately drifted sampler, show they are calibrated
and have power.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

from speclab.sim.api import EngineConfig, EngineRequest, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.lm import load_lm
from speclab.sim.sampling import adjust

from .helpers import drain
from .stat_tools import (
    chi2_critical,
    entropy_moments,
    ks_uniform,
    loglik_z,
    pooled_chi_square,
    randomized_pit,
)

ESSAY = [{"role": "user", "content": "Write a short essay about rivers."}]
N = 2500


@dataclass
class Oracle:
    """The target's adjusted next-token distribution after the prompt plus any output prefix (cached)."""

    prompt: list[int]
    temperature: float
    top_k: int
    top_p: float
    cache: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.target = load_lm("sim-8b")

    def dist(self, prefix: tuple[int, ...]) -> np.ndarray:
        hit = self.cache.get(prefix)
        if hit is None:
            state = self.target.state(self.prompt)
            state.extend(list(prefix))  # output tokens, not prompt: the copy features tell them apart
            probs = self.target.probs(state)
            hit = self.cache[prefix] = adjust(probs, self.temperature, self.top_k, self.top_p)
        return hit

    def prob(self, seq: tuple[int, ...]) -> float:
        return math.prod(float(self.dist(seq[:i])[t]) for i, t in enumerate(seq))


def essay_prompt(answer_start: str) -> list[int]:
    """The essay request with the answer already begun, so the next tokens have real freedom."""
    tok = load_lm("sim-8b").tokenizer
    return tok.encode(tok.apply_chat_template(ESSAY)) + tok.encode(answer_start)


def outputs(prompt: list[int], spec: SpecConfig | None, params: SamplingParams, seed0: int,
            faults: dict[str, float] | None = None, n: int = N) -> list[tuple[int, ...]]:
    engine = build_engine(EngineConfig("sim-8b", speculative=spec, max_num_seqs=512, faults=faults or {}))
    for i in range(n):
        sampling = SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature,
                                  top_p=params.top_p, top_k=params.top_k, seed=seed0 + i)
        engine.add_request(EngineRequest(str(i), prompt, sampling, 0.0))
    run = drain(engine)
    return [tuple(run.tokens[str(i)]) for i in range(n)]


@dataclass
class Verdict:
    chi2: float
    chi2_crit: float
    ks: float
    ks_crit: float
    z: float
    positions: int

    @property
    def consistent(self) -> bool:
        return self.chi2 < self.chi2_crit and self.ks < self.ks_crit and abs(self.z) < 3.29


def judge(samples: list[tuple[int, ...]], oracle: Oracle, first: int = 1) -> Verdict:
    """Goodness of fit of the samples' first tokens to the target (PIT/likelihood from position ``first``)."""
    stat, crit, _ = pooled_chi_square(Counter(s[:3] for s in samples), oracle.prob)
    rng = np.random.default_rng(12345)
    pits: list[float] = []
    logps: list[float] = []
    means: list[float] = []
    variances: list[float] = []
    for s in samples:
        for i in range(first, len(s)):
            dist = oracle.dist(s[:i])
            pits.append(randomized_pit(dist, s[i], rng))
            logps.append(math.log(float(dist[s[i]])))
            mean, var = entropy_moments(dist)
            means.append(mean)
            variances.append(var)
    ks, ks_crit = ks_uniform(pits)
    return Verdict(stat, crit, ks, ks_crit, loglik_z(logps, means, variances), len(pits))


K4 = SpecConfig("draft_model", 4, "sim-1b")
CASES = {  # answer start (entropy of the next token at T=2), draft, sampling
    "k4-T2-flat": ("In the", K4, SamplingParams(max_tokens=6, temperature=2.0)),  # 5.0 nats, top p 0.03
    "k4-T2": ("Rivers", K4, SamplingParams(max_tokens=6, temperature=2.0)),
    "k2-T2-top_p": ("Rivers are", SpecConfig("draft_model", 2, "sim-1b"),
                    SamplingParams(max_tokens=4, temperature=2.0, top_p=0.8)),
    "k2-T2-top_k": ("The", SpecConfig("draft_model", 2, "sim-0.5b"),
                    SamplingParams(max_tokens=4, temperature=2.0, top_k=10, top_p=0.95)),
}


def setup(case: str) -> tuple[list[int], SpecConfig, SamplingParams, Oracle]:
    start, spec, params = CASES[case]
    prompt = essay_prompt(start)
    return prompt, spec, params, Oracle(prompt, params.temperature, params.top_k, params.top_p)


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_output_follows_the_target_exactly(case: str) -> None:
    prompt, spec, params, oracle = setup(case)
    samples = outputs(prompt, spec, params, seed0=20_000)
    verdict = judge(samples, oracle, first=1)  # position 0 comes from prefill: every later one is verified
    assert verdict.positions > 2 * N
    assert verdict.consistent, verdict


def test_plain_engine_passes_the_same_checks_and_the_arms_agree() -> None:
    prompt, spec, params, oracle = setup("k4-T2-flat")
    plain = outputs(prompt, None, params, seed0=90_000)
    assert judge(plain, oracle, first=0).consistent
    speculative = outputs(prompt, spec, params, seed0=20_000)
    a, b = Counter(s[:3] for s in plain), Counter(s[:3] for s in speculative)
    cells = [c for c in set(a) | set(b) if a[c] + b[c] >= 10]
    rest = (N - sum(a[c] for c in cells), N - sum(b[c] for c in cells))
    table = [(a[c], b[c]) for c in cells] + ([rest] if sum(rest) >= 10 else [])
    stat = sum((x - y) ** 2 / (x + y) for x, y in table)  # 2×K homogeneity with equal arm sizes
    assert len(table) > 20
    assert stat < chi2_critical(len(table) - 1), stat


def test_the_checks_catch_a_slight_sampling_drift() -> None:
    prompt, spec, params, oracle = setup("k4-T2-flat")
    drifted = outputs(prompt, spec, params, seed0=20_000, faults={"sampling_drift": 0.05})  # T 2.0 -> 2.1
    verdict = judge(drifted, oracle, first=1)
    assert not verdict.consistent, verdict
