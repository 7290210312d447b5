"""Sampling and speculative verification over full next-token distributions.

Verification follows Leviathan et al. / Chen et al.: a draft token x drawn from q is accepted
with probability min(1, p(x)/q(x)); on rejection the replacement is drawn from
norm(max(0, p − q)); if all drafts pass, a bonus token is drawn from p. The output is then
distributed exactly as p. For deterministic proposers (n-gram lookup, greedy drafts) q is one-hot.
"""

from __future__ import annotations

import numpy as np

from .api import SamplingParams
from .ngram import FloatArray


def is_greedy(params: SamplingParams) -> bool:
    return params.temperature <= 1e-5


def adjust(p: FloatArray, temperature: float, top_k: int, top_p: float) -> FloatArray:
    """Apply temperature, top-k and top-p to a distribution; returns a fresh normalised array."""
    q = p.copy() if temperature == 1.0 else np.exp(np.log(np.maximum(p, 1e-300)) / temperature)
    if 0 < top_k < len(q):
        threshold = np.partition(q, -top_k)[-top_k]
        q[q < threshold] = 0.0
    if top_p < 1.0:
        order = np.argsort(-q, kind="stable")
        cum = np.cumsum(q[order])
        keep = int(np.searchsorted(cum, top_p * cum[-1])) + 1
        q[order[keep:]] = 0.0
    q /= q.sum()
    return q


def sample(p: FloatArray, rng: np.random.Generator) -> int:
    cum = np.cumsum(p)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), len(p) - 1))


def accept_draft(p: FloatArray, q: FloatArray | None, token: int, rng: np.random.Generator) -> bool:
    """Rejection test for one draft token; ``q=None`` means the proposal was deterministic."""
    qx = 1.0 if q is None else float(q[token])
    px = float(p[token])
    if px >= qx:
        return True
    return bool(rng.random() < px / qx)


def residual(p: FloatArray, q: FloatArray | None, token: int) -> FloatArray:
    """norm(max(0, p − q)): the distribution a rejected position is resampled from."""
    r = p.copy()
    if q is None:
        r[token] = 0.0
    else:
        r = np.maximum(r - q, 0.0)
    total = r.sum()
    if total <= 0.0:
        return p
    r /= total
    return r
