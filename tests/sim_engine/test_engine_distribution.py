"""At temperature > 0 speculative sampling reproduces the target's distribution (chi-square)."""

from __future__ import annotations

import math

import numpy as np

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.lm import load_lm
from speclab.sim.sampling import accepts, adjust, residual, sample

from .helpers import add, drain

ESSAY = [{"role": "user", "content": "Write a short essay about rivers."}]


def chi_square(counts: dict[int, int], p: np.ndarray) -> tuple[float, float]:
    """Statistic and the 0.1% critical value, pooling tokens expected fewer than 5 times."""
    n = sum(counts.values())
    expected = p * n
    big = np.flatnonzero(expected >= 5)
    observed = np.array([counts.get(int(t), 0) for t in big], dtype=float)
    exp_big = expected[big]
    rest_obs, rest_exp = n - observed.sum(), n - exp_big.sum()
    stat = float(((observed - exp_big) ** 2 / exp_big).sum())
    df = len(big) - 1
    if rest_exp >= 5:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        df += 1
    z = 3.09
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, crit


def test_verification_step_reproduces_target_distribution() -> None:
    target, draft = load_lm("sim-8b"), load_lm("sim-1b")
    tok = target.tokenizer
    prompt = tok.encode(tok.apply_chat_template(ESSAY)) + tok.encode("Rivers")
    p = adjust(target.probs(target.state(prompt)), 1.0, -1, 1.0)
    q = adjust(draft.probs(draft.state(prompt)), 1.0, -1, 1.0)
    assert float(np.abs(p - q).sum()) > 0.2  # the draft really is a different model
    rng = np.random.default_rng(1)
    counts: dict[int, int] = {}
    draft_counts: dict[int, int] = {}
    for _ in range(12000):
        d = sample(q, rng)
        draft_counts[d] = draft_counts.get(d, 0) + 1
        token = d if accepts(float(p[d]), q, d, float(rng.random())) else sample(residual(p, q, d), rng)
        counts[token] = counts.get(token, 0) + 1
    stat, crit = chi_square(counts, p)
    assert stat < crit, (stat, crit)
    wrong, crit_q = chi_square(draft_counts, p)  # the same test rejects the draft's own samples
    assert wrong > crit_q


def _second_tokens(config: EngineConfig, n: int, params: SamplingParams) -> tuple[dict[int, int], int, list[int]]:
    engine = build_engine(config)
    for i in range(n):
        add(engine, str(i), ESSAY, SamplingParams(max_tokens=3, temperature=params.temperature,
                                                  top_p=params.top_p, seed=1000 + i))
    run = drain(engine)
    firsts = [run.tokens[str(i)][0] for i in range(n)]
    mode = max(set(firsts), key=firsts.count)
    seconds: dict[int, int] = {}
    for i in range(n):
        toks = run.tokens[str(i)]
        if toks[0] == mode and len(toks) > 1:
            seconds[toks[1]] = seconds.get(toks[1], 0) + 1
    tok = engine.tokenizer
    return seconds, mode, tok.encode(tok.apply_chat_template(ESSAY))


def test_engine_speculative_output_matches_target_and_drift_is_detected() -> None:
    params = SamplingParams(temperature=0.9, top_p=0.95)
    spec = SpecConfig("draft_model", 3, "sim-0.5b")
    seconds, mode, prompt = _second_tokens(EngineConfig("sim-8b", speculative=spec, max_num_seqs=512), 3000, params)
    target = load_lm("sim-8b")
    p = adjust(target.probs(target.state([*prompt, mode])), 0.9, -1, 0.95)
    stat, crit = chi_square(seconds, p)
    assert sum(seconds.values()) > 1000
    assert stat < crit, (stat, crit)
    drifted = EngineConfig("sim-8b", speculative=spec, max_num_seqs=512, faults={"sampling_drift": 0.6})
    seconds_d, mode_d, _ = _second_tokens(drifted, 3000, params)
    assert mode_d == mode
    stat_d, crit_d = chi_square(seconds_d, p)
    assert stat_d > crit_d, (stat_d, crit_d)
