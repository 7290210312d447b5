"""The target's shortcuts give what the full computation gives.

``SimLM.prob_of`` (one token's probability without the scores array, used by the plain accept
test) equals ``scores[x] / scores.sum()`` to the last bits, and the chain walk bounded by each
context's run of extensions finds the chains an unbounded bisection finds.
"""

from __future__ import annotations

import numpy as np

from speclab.sim.lm import load_lm, training_stream
from speclab.sim.ngram import NgramCounts

STORY = "Write a long story about a lighthouse keeper. Once upon a time there was"


def test_prob_of_is_the_score_over_the_total() -> None:
    lm = load_lm("sim-8b")
    state = lm.state(lm.tokenizer.encode(STORY))
    rng = np.random.default_rng(0)
    for _ in range(200):  # a T=1 path: new deep contexts, copy and pointer boosts on the way
        scores = lm.scores(state)
        total = float(np.add.reduce(scores))
        for x in [*rng.integers(0, lm.vocab_size, 3).tolist(), int(scores.argmax())]:
            exact = float(scores[x]) / total
            assert abs(lm.prob_of(state, x) - exact) <= 1e-13 * exact
        state.push(int(rng.choice(len(scores), p=scores / total)))


def _reference_walk(counts: NgramCounts, context: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    cid = context[-1]
    chain = [(1, cid)] if counts.types[1][cid] > 0 else []
    for n in range(2, len(context) + 1):
        keys = counts.keys[n]
        key = cid * counts.vocab_size + context[-n]
        pos = int(np.searchsorted(keys, key))
        if pos >= len(keys) or keys[pos] != key:
            break
        cid = pos
        if counts.types[n][cid] > 0:
            chain.append((n, cid))
    return tuple(chain)


def test_the_bounded_walk_finds_the_same_chains() -> None:
    counts = load_lm("sim-8b").counts
    stream = training_stream("sim-8b")
    rng = np.random.default_rng(1)
    for _ in range(300):  # corpus contexts (deep chains), half with one token changed (early breaks)
        end = int(rng.integers(counts.order, len(stream)))
        context = stream[end - counts.order + 1: end].tolist()
        if rng.random() < 0.5:
            context[int(rng.integers(0, len(context)))] = int(rng.integers(0, counts.vocab_size))
        assert counts._walk(tuple(context)) == _reference_walk(counts, tuple(context))
