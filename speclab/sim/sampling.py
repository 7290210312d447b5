"""Sampling and speculative verification over full next-token distributions.

Verification follows Leviathan et al. / Chen et al.: a draft token x drawn from q is accepted
with probability min(1, p(x)/q(x)); on rejection the replacement is drawn from
norm(max(0, p − q)); if all drafts pass, a bonus token is drawn from p. The output is then
distributed exactly as p, provided p and q are the *adjusted* distributions (temperature, top-k,
top-p applied to each) and q is the one the draft really sampled from. For deterministic proposers
(n-gram lookup, greedy or re-tokenized drafts) q is one-hot.
"""

from __future__ import annotations

import numpy as np

from .api import SamplingParams
from .ngram import FloatArray

_RESCALE_BELOW_T = 0.05  # above it max(p)^(1/T) >= (1/vocab)^20 cannot underflow for vocabularies < 10^15
_BLOCK = 64
_NUCLEUS_FIRST = 64  # sample() finds the block of the inverse CDF first, then the token inside it
# What ndarray.sum and np.cumsum call, without their Python wrappers (the same sums, bit for bit).
_reduce = np.add.reduce
_accumulate = np.add.accumulate


def is_greedy(params: SamplingParams) -> bool:
    return params.temperature <= 1e-5


def adjust(p: FloatArray, temperature: float, top_k: int, top_p: float, *, inplace: bool = False) -> FloatArray:
    """Apply temperature, top-k and top-p to a distribution (or unnormalised scores); returns it normalised.

    Temperature is p^(1/T); below ``_RESCALE_BELOW_T`` on p scaled to a maximum of 1 first, so a
    low temperature cannot underflow every entry to zero. ``inplace`` lets a caller that owns
    ``p`` skip a copy.
    """
    q = p if inplace else p.copy()
    if temperature != 1.0:
        if temperature < _RESCALE_BELOW_T:
            q /= q.max()
        np.power(q, 1.0 / temperature, out=q)
    if 0 < top_k < len(q):
        threshold = np.partition(q, -top_k)[-top_k]
        kept = np.flatnonzero(q >= threshold)
        head = q[kept]
        if top_p < 1.0:
            _nucleus(head, top_p)  # on the top-k survivors only: a few dozen values, not the vocabulary
        q[:] = 0.0
        q[kept] = head
    elif top_p < 1.0:
        _nucleus(q, top_p)
    q /= _reduce(q)
    return q


def _nucleus(q: FloatArray, top_p: float) -> None:
    """Zero all but the fewest most likely tokens (ties: lower id first) holding ``top_p`` of the mass.

    Equivalent to a stable full sort, but it sorts only values (the 64 largest first, all of them
    if those hold too little mass) to find the cut-off value; ties at the cut-off keep the lowest ids.
    """
    target = top_p * float(q.sum())
    vals = np.sort(np.partition(q, -_NUCLEUS_FIRST)[-_NUCLEUS_FIRST:])[::-1] if len(q) > _NUCLEUS_FIRST else q
    cum = np.cumsum(vals)
    if vals is q or cum[-1] < target:
        vals = np.sort(q)[::-1]
        cum = np.cumsum(vals)
    keep = min(int(np.searchsorted(cum, target)) + 1, len(vals))
    cut = vals[keep - 1]
    ties = np.flatnonzero(q == cut)[: keep - int(np.count_nonzero(q > cut))]
    q[q <= cut] = 0.0
    q[ties] = cut


def sample(p: FloatArray, rng: np.random.Generator) -> int:
    """One token from ``p`` (unnormalised is fine) by inverse CDF; never a zero-probability token.

    Summing blocks first and the chosen block second costs a fraction of a full-vocabulary cumsum.
    """
    n = len(p)
    whole = n - n % _BLOCK
    bcum = _accumulate(_reduce(p[:whole].reshape(-1, _BLOCK), axis=1))
    body = float(bcum[-1]) if whole else 0.0
    x = rng.random() * (body + float(_reduce(p[whole:])))
    if x < body:
        b = int(bcum.searchsorted(x, side="right"))
        lo = b * _BLOCK
        x -= float(bcum[b - 1]) if b else 0.0
    else:
        lo = whole
        x -= body
    block = p[lo: lo + _BLOCK]
    i = int(_accumulate(block).searchsorted(x, side="right"))
    if i >= len(block):  # x rounded up to the block's total: its last token with mass
        nonzero = np.flatnonzero(block)
        if not len(nonzero):  # an empty tail block reached by rounding: the last token with mass
            return int(np.flatnonzero(p)[-1])
        i = int(nonzero[-1])
    return lo + i


def acceptance_probability(p: FloatArray, q: FloatArray | None, token: int) -> float:
    """min(1, p(x)/q(x)) for draft token x; ``q=None`` means the proposal was deterministic."""
    qx = 1.0 if q is None else float(q[token])
    px = float(p[token])
    if px >= qx:
        return 1.0
    return px / qx


def accepts(px: float, q: FloatArray | None, token: int, uniform: float) -> bool:
    """vLLM's test for draft token x given p(x) and its uniform: q(x) > 0 and p(x) / q(x) >= uniform.

    ``q`` of None is a deterministic proposal (q(x) = 1). The rest of p is not needed to decide.
    """
    qx = 1.0 if q is None else float(q[token])
    return qx > 0.0 and px / qx >= uniform


def residual(p: FloatArray, q: FloatArray | None, token: int) -> FloatArray:
    """norm(max(0, p − q)): the distribution a rejected position is resampled from."""
    r = p.copy()
    if q is None:
        r[token] = 0.0
    else:
        r = np.maximum(r - q, 0.0)
    total = _reduce(r)
    if total <= 0.0:
        return p
    r /= total
    return r
