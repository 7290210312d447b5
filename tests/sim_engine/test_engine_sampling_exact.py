"""Exact checks of one verification position: the output distribution computed analytically is p.

For a real target/draft pair at high temperature, with and without top-p / top-k, the law of
one speculative position is Σ_x q(x)[a(x)·δ_x + (1 − a(x))·residual_x], where a and residual are
the sampler's own functions. It must equal the adjusted target distribution to float precision.
"""

from __future__ import annotations

import numpy as np
import pytest

from speclab.sim.api import EngineConfig, EngineRequest, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.lm import SimLM, load_lm
from speclab.sim.proposers import DraftModelProposer
from speclab.sim.sampling import acceptance_probability, adjust, residual, sample

from .stat_tools import chi2_critical

ESSAY = [{"role": "user", "content": "Write a short essay about rivers."}]
SETTINGS = [(2.0, -1, 1.0), (2.0, -1, 0.9), (2.0, 50, 1.0), (2.0, 20, 0.8), (1.0, -1, 0.9), (0.7, 8, 1.0)]


def one_position_law(p: np.ndarray, q: np.ndarray | None, drafts: list[int]) -> np.ndarray:
    """Exact output distribution of one verified position, draft token x ~ q (or fixed when q is None)."""
    out = np.zeros_like(p)
    weights = [(x, 1.0) for x in drafts] if q is None else [(int(x), float(q[x])) for x in np.flatnonzero(q)]
    for x, wx in weights:
        a = acceptance_probability(p, q, x)
        out[x] += wx * a
        if a < 1.0:
            out += wx * (1.0 - a) * residual(p, q, x)
    return out


def contexts(target: SimLM, n: int) -> list[list[int]]:
    """The prompt and prompts extended along a T=2 sample path (flat, long-tailed distributions)."""
    tok = target.tokenizer
    prompt = tok.encode(tok.apply_chat_template(ESSAY))
    rng = np.random.default_rng(7)
    out = [prompt]
    for _ in range(n - 1):
        p = adjust(target.probs(target.state(out[-1])), 2.0, -1, 1.0)
        out.append([*out[-1], sample(p, rng)])
    return out


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), SETTINGS)
def test_one_position_law_equals_target(temperature: float, top_k: int, top_p: float) -> None:
    target, draft = load_lm("sim-8b"), load_lm("sim-1b")
    distances = []
    for ctx in contexts(target, 4):
        p = adjust(target.probs(target.state(ctx)), temperature, top_k, top_p)
        q = adjust(draft.probs(draft.state(ctx)), temperature, top_k, top_p)
        distances.append(0.5 * float(np.abs(p - q).sum()))
        law = one_position_law(p, q, [])
        assert abs(law.sum() - 1.0) < 1e-12
        assert float(np.abs(law - p).max()) < 1e-13, float(np.abs(law - p).max())
    assert any(0.2 < d < 0.999 for d in distances)  # a real, imperfect draft: many rejections to resample


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), SETTINGS[:3])
def test_one_hot_proposals_keep_the_target(temperature: float, top_k: int, top_p: float) -> None:
    target = load_lm("sim-8b")
    ctx = contexts(target, 1)[0]
    p = adjust(target.probs(target.state(ctx)), temperature, top_k, top_p)
    order = np.argsort(-p)
    for x in (int(order[0]), int(order[5]), int(order[-1])):  # likely, middling, and (maybe filtered) rare
        law = one_position_law(p, None, [x])
        assert float(np.abs(law - p).max()) < 1e-13


def test_adjust_filters_and_normalises() -> None:
    target = load_lm("sim-8b")
    p = target.probs(target.state(contexts(target, 1)[0]))
    flat = adjust(p, 2.0, -1, 1.0)
    ref = np.sqrt(p) / np.sqrt(p).sum()
    assert float(np.abs(flat - ref).max()) < 1e-15
    assert np.count_nonzero(adjust(p, 2.0, 20, 1.0)) == 20
    nucleus = adjust(p, 2.0, -1, 0.6)
    kept = np.sort(flat)[::-1]
    need = int(np.searchsorted(np.cumsum(kept), 0.6)) + 1
    assert np.count_nonzero(nucleus) == need
    assert abs(nucleus.sum() - 1.0) < 1e-12
    assert np.allclose(nucleus[nucleus > 0], flat[nucleus > 0] / flat[nucleus > 0].sum(), rtol=1e-12)
    cold = adjust(p, 1e-4, -1, 1.0)  # far below where exp(log p / T) underflows everywhere
    assert np.isfinite(cold).all() and cold[int(np.argmax(p))] == 1.0


class _EdgeRng:
    """A generator stand-in that returns the largest double below 1."""

    def random(self) -> float:
        return float(np.nextafter(1.0, 0.0))


def test_sample_never_returns_a_zero_probability_token() -> None:
    p = np.zeros(300)
    p[[3, 70, 130]] = [0.1, 0.3, 0.6]
    for scale in (1.0, 1e-300, 3.7):
        assert sample(p * scale, _EdgeRng()) == 130  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    assert {sample(p, rng) for _ in range(2000)} == {3, 70, 130}


def test_greedy_drafting_proposes_the_argmax_as_one_hot() -> None:
    """vLLM 0.33's default draft_sample_method: the draft's argmax at any temperature, q one-hot (None)."""
    engine = build_engine(EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b")))
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template(ESSAY))
    engine.add_request(EngineRequest("r", prompt, SamplingParams(max_tokens=64, temperature=1.5, seed=3), 0.0))
    engine.step(0.0)
    seq = engine._seqs["r"]
    proposer = engine.proposer
    assert isinstance(proposer, DraftModelProposer)
    drafts, qs = proposer.propose(seq, 4)
    state = proposer.lm.state(seq.tokens)
    for d, q in zip(drafts, qs, strict=True):
        assert q is None
        assert d == proposer.lm.greedy(state)
        state.push(d)


def test_engine_verifies_against_the_q_the_draft_sampled_from() -> None:
    """Probabilistic drafting: the proposer's q per draft is the adjusted draft distribution at its context."""
    spec = SpecConfig("draft_model", 4, "sim-1b", draft_sample_method="probabilistic")
    engine = build_engine(EngineConfig("sim-8b", speculative=spec))
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template(ESSAY))
    params = SamplingParams(max_tokens=64, temperature=2.0, top_p=0.9, top_k=200, seed=11)
    engine.add_request(EngineRequest("r", prompt, params, 0.0))
    engine.step(0.0)
    seq = engine._seqs["r"]
    proposer = engine.proposer
    assert isinstance(proposer, DraftModelProposer)
    draft = proposer.lm
    for _ in range(5):
        drafts, qs = proposer.propose(seq, 4)
        state = draft.state(prompt)
        state.extend(seq.tokens[len(prompt):])
        for d, q in zip(drafts, qs, strict=True):
            assert q is not None
            expected = adjust(draft.probs(state), 2.0, 200, 0.9)
            assert float(np.abs(q - expected).max()) < 1e-15
            assert q[d] > 0
            state.push(d)
        # The drafts stay on the proposer's state, after the sequence's tokens, for the next proposal.
        assert seq.draft_state is not None and seq.draft_state.tokens == seq.tokens + drafts


@pytest.mark.parametrize("size", [50, 64, 100, 2256])
def test_sample_follows_p_across_blocks_and_the_tail(size: int) -> None:
    rng = np.random.default_rng(size)
    p = rng.random(size) ** 3
    p[rng.random(size) < 0.3] = 0.0
    p[-1] = 0.5 * p.sum()  # heavy mass in the last (possibly partial) block
    draws = np.bincount([sample(p, rng) for _ in range(20_000)], minlength=size)
    expected = 20_000 * p / p.sum()
    assert draws[p == 0].sum() == 0
    big = expected >= 5
    stat = float((((draws - expected) ** 2)[big] / expected[big]).sum())
    rest_obs, rest_exp = draws[~big].sum(), expected[~big].sum()
    df = int(big.sum()) - 1 + (rest_exp >= 5)
    if rest_exp >= 5:
        stat += float((rest_obs - rest_exp) ** 2 / rest_exp)
    assert stat < chi2_critical(df), (stat, df)


def reference_adjust(p: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Textbook temperature / top-k / top-p with a full stable sort."""
    q = np.power(p, 1.0 / temperature)
    if 0 < top_k < len(q):
        q[q < np.sort(q)[-top_k]] = 0.0
    if top_p < 1.0:
        order = np.argsort(-q, kind="stable")
        cum = np.cumsum(q[order])
        q[order[int(np.searchsorted(cum, top_p * q.sum())) + 1:]] = 0.0
    return q / q.sum()


def test_adjust_matches_a_full_sort_reference() -> None:
    target = load_lm("sim-8b")
    rng = np.random.default_rng(3)
    dists = [target.probs(target.state(ctx)) for ctx in contexts(target, 6)]
    dists += [rng.dirichlet(np.full(2256, alpha)) for alpha in (0.01, 1.0, 100.0)]
    dists.append(np.full(500, 1.0) / 500)  # all ties
    for p in dists:
        for temperature, top_k, top_p in [(2.0, -1, 0.99), (2.0, 30, 0.5), (0.8, -1, 0.9), (1.0, -1, 0.999)]:
            ours, ref = adjust(p, temperature, top_k, top_p), reference_adjust(p, temperature, top_k, top_p)
            assert np.array_equal(ours > 0, ref > 0)
            assert float(np.abs(ours - ref).max()) < 1e-12


@pytest.mark.parametrize("method", ["draft_model", "eagle"])
def test_the_states_match_the_tokens_after_every_step(method: str) -> None:
    """Accepted drafts stay on the states between steps (no push and pop round trip): after every
    step each running sequence's target state is its tokens and its draft state starts with them,
    greedy and sampled, beside requests that stop in the middle of a step's drafts (max_tokens 3, 7)."""
    spec = SpecConfig(method, 4, "sim-1b" if method == "draft_model" else "h")
    engine = build_engine(EngineConfig("sim-8b", speculative=spec))
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template(ESSAY))
    for i, (max_tokens, temperature) in enumerate([(3, 0.0), (7, 1.0), (40, 0.0), (40, 1.0), (25, 0.7)]):
        engine.add_request(EngineRequest(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                                                          seed=i, ignore_eos=True), 0.0))
    now, produced = 0.0, 0
    while engine.has_unfinished():
        result = engine.step(now)
        now += result.duration
        produced += sum(len(o.new_token_ids) for o in result.outputs)
        for seq in engine._seqs.values():
            assert seq.target_state.tokens == seq.tokens
            if seq.draft_state is not None:
                assert seq.draft_state.tokens[:seq.draft_base] == seq.tokens[:seq.draft_base]
    assert produced == 3 + 7 + 40 + 40 + 25  # every request runs to max_tokens (EOS ignored, no stop strings)
