"""Block verification is lossless, computed exactly: the law of the first two output tokens is the target's.

For a real target/draft pair under top-k (small supports, so every draft block can be enumerated)
the output of one block-verified step of two drafts is a mixture over the drafts and the cut point
τ (P(τ=2) = h_2, P(τ=1) = (1 − h_2)·h_1, P(τ=0) = (1 − h_2)·(1 − h_1)): the drafts up to τ, then a
token from the block residual. Where τ = 0 the second token comes from the next step, whose first
token is the target's (checked first). Both laws must equal the target's to float precision, with
probabilistic drafts (q the draft's own adjusted distribution) and greedy ones (q one-hot).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from speclab.sim.lm import SimLM, load_lm
from speclab.sim.sampling import adjust
from speclab.sim.verify import block_residual, block_thresholds, joint_ratios

ESSAY = [{"role": "user", "content": "Write a short essay about rivers."}]


def _dist(lm: SimLM, context: list[int], temperature: float, top_k: int) -> np.ndarray:
    return adjust(lm.probs(lm.state(context)), temperature, top_k, 1.0)


def _proposals(draft: SimLM, context: list[int], temperature: float, top_k: int, greedy: bool
               ) -> list[tuple[list[int], list[np.ndarray | None], float]]:
    """Every two-token draft block with its probability and the q of each draft (None: one-hot)."""
    q0 = _dist(draft, context, temperature, top_k)
    firsts = [int(np.argmax(draft.probs(draft.state(context))))] if greedy else [int(x) for x in np.flatnonzero(q0)]
    out = []
    for x1 in firsts:
        q1 = _dist(draft, [*context, x1], temperature, top_k)
        seconds = ([int(np.argmax(draft.probs(draft.state([*context, x1]))))] if greedy
                   else [int(x) for x in np.flatnonzero(q1)])
        for x2 in seconds:
            weight = 1.0 if greedy else float(q0[x1] * q1[x2])
            qs: list[np.ndarray | None] = [None, None] if greedy else [q0, q1]
            out.append(([x1, x2], qs, weight))
    return out


@pytest.mark.parametrize("greedy", [False, True], ids=["probabilistic", "greedy"])
@pytest.mark.parametrize(("temperature", "top_k"), [(1.5, 4), (1.0, 6)])
def test_two_token_law_of_a_block_step_is_the_targets(greedy: bool, temperature: float, top_k: int) -> None:
    target, draft = load_lm("sim-8b"), load_lm("sim-1b")
    tok = target.tokenizer
    context = tok.encode(tok.apply_chat_template(ESSAY)) + tok.encode("Rivers are")
    p0 = _dist(target, context, temperature, top_k)
    vocab = len(p0)
    after: dict[int, np.ndarray] = {}

    def p_after(token: int) -> np.ndarray:
        if token not in after:
            after[token] = _dist(target, [*context, token], temperature, top_k)
        return after[token]

    first = np.zeros(vocab)
    joint: dict[tuple[int, int], float] = {}
    cut_somewhere = 0.0
    for drafts, qs, weight in _proposals(draft, context, temperature, top_k, greedy):
        x1, x2 = drafts
        ps = [p0, p_after(x1)]
        h1, h2 = block_thresholds(ps, qs, drafts)
        ratios = joint_ratios(ps, qs, drafts)
        p_tau = {2: h2, 1: (1 - h2) * h1, 0: (1 - h2) * (1 - h1)}
        cut_somewhere += weight * (p_tau[0] + p_tau[1])
        res0 = block_residual(ratios[0], p0, qs[0], x1)
        res1 = block_residual(ratios[1], ps[1], qs[1], x2)
        first[x1] += weight * (p_tau[2] + p_tau[1])
        first += weight * p_tau[0] * res0
        joint[(x1, x2)] = joint.get((x1, x2), 0.0) + weight * p_tau[2]
        for b in np.flatnonzero(res1):
            joint[(x1, int(b))] = joint.get((x1, int(b)), 0.0) + weight * p_tau[1] * float(res1[b])
        for a in np.flatnonzero(res0):
            pa = p_after(int(a))
            for b in np.flatnonzero(pa):
                key = (int(a), int(b))
                joint[key] = joint.get(key, 0.0) + weight * p_tau[0] * float(res0[a]) * float(pa[b])
    assert 0.01 < cut_somewhere < 0.99  # the drafts are really checked: blocks are cut and resampled
    assert float(np.abs(first - p0).max()) < 1e-12
    support: list[int] = [int(t) for t in np.flatnonzero(p0)]
    for x, y in itertools.product(support, list(range(vocab))):
        expected = float(p0[x]) * float(p_after(x)[y])
        assert abs(joint.get((x, y), 0.0) - expected) < 1e-12, (x, y)
    assert abs(sum(joint.values()) - 1.0) < 1e-12
