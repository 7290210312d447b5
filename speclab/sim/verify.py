"""Verification of one step's drafts: vLLM 0.33's rejection-sampling methods, one class each.

Every verifier sees the target through a ``TargetView`` (its next-token distribution at each draft
position) and returns the accepted drafts followed by one more token, the recovered or the bonus
one. ``standard`` is Leviathan et al.'s token-by-token test and ``block`` Sun et al.'s joint block
verification: both lossless (greedy output is the baseline's; sampled output is distributed as the
target's). ``synthetic`` accepts at configured rates whatever the target says and ``fly`` accepts
some rejected drafts when the target is unsure and the next drafts agree: both lossy, as in vLLM.
Greedy requests are verified by the target's argmax in every method (``block`` is ``standard``
there). A draft's ``q`` of ``None`` is a deterministic proposal (one-hot), as vLLM treats greedy
drafts, n-gram and suffix drafts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from speclab.model.speculative import conditional_rates

from .grammar.matcher import BoolArray, apply_mask
from .lm import ContextState, SimLM
from .ngram import FloatArray
from .sampling import accepts, residual, sample

_reduce = np.add.reduce

Adjust = Callable[[FloatArray], FloatArray]  # raw scores (a fresh array) -> the request's sampling distribution
Force = Callable[[], bool]  # the lossy-verifier fault: True accepts a draft the method rejected


@dataclass(slots=True)
class Verdict:
    accepted: int
    tokens: list[int]  # the accepted drafts, then the recovered or bonus token


class TargetView:
    """The target at each draft position of one step, computed on demand: position i follows drafts[:i].

    Drafts are pushed onto the target's own state to reach a position and taken off in ``close``.
    Under a grammar, ``masks[i]`` (one row per draft position and one for the bonus) is applied to
    the raw scores first, so every method verifies and resamples against the constrained target.
    """

    def __init__(self, lm: SimLM, state: ContextState, drafts: Sequence[int], adjust: Adjust,
                 masks: BoolArray | None = None, *, plain: bool = False) -> None:
        """``plain``: ``adjust`` only normalises (temperature 1, no top-k or top-p), so ``prob``
        may divide one score by the total instead of the whole array."""
        self.lm, self.state, self.drafts, self._adjust, self.masks = lm, state, drafts, adjust, masks
        self.plain = plain
        self.base = len(state)
        self._probs: dict[int, FloatArray] = {}
        self._unnormed: dict[int, tuple[FloatArray, float]] = {}
        self._argmax: dict[int, int] = {}
        self._raw: dict[int, FloatArray] = {}

    def _position(self, i: int) -> None:
        """The target's state after drafts[:i]."""
        have = len(self.state) - self.base
        if have > i:
            self.state.truncate(self.base + i)
        elif have == i - 1:
            self.state.push(self.drafts[have])
        elif have < i:
            self.state.extend(list(self.drafts[have:i]))

    def _scores(self, i: int) -> FloatArray:
        self._position(i)
        scores = self.lm.scores(self.state)
        return scores if self.masks is None else apply_mask(scores, self.masks[i])

    def probs(self, i: int) -> FloatArray:
        """The request's sampling distribution (temperature, top-k, top-p) at position i."""
        hit = self._probs.get(i)
        if hit is None:
            lazy = self._unnormed.pop(i, None)
            if lazy is not None:
                scores, total = lazy
                scores /= total  # what adjust does when plain
                hit = self._probs[i] = scores
            else:
                hit = self._probs[i] = self._adjust(self._scores(i))
        return hit

    def prob(self, i: int, token: int) -> float:
        """``probs(i)[token]``; when plain and unconstrained, the one score over the total
        (``SimLM.prob_of``), the scores built only if position i is sampled from later. Its total
        may differ from the array's in the last bits: an accept test against a uniform decides the
        same but for a chance below about 1e-12 (the uniform falling between the two)."""
        hit = self._probs.get(i)
        if hit is not None or not self.plain:
            return float((hit if hit is not None else self.probs(i))[token])
        if self.masks is None:
            self._position(i)
            return self.lm.prob_of(self.state, token)
        lazy = self._unnormed.get(i)
        if lazy is None:
            scores = self._scores(i)
            lazy = self._unnormed[i] = (scores, float(_reduce(scores)))
        return float(lazy[0][token]) / lazy[1]

    def raw(self, i: int) -> FloatArray:
        """The target's own distribution at position i (temperature 1, nothing filtered)."""
        hit = self._raw.get(i)
        if hit is None:
            scores = self._scores(i)
            hit = self._raw[i] = scores / scores.sum()
        return hit

    def argmax(self, i: int) -> int:
        hit = self._argmax.get(i)
        if hit is None:
            hit = self._argmax[i] = int((self._raw[i] if i in self._raw else self._scores(i)).argmax())
        return hit

    def close(self, keep: int = 0) -> None:
        """Take the drafts off the target's state, but for the first ``keep`` (the accepted ones,
        which the engine commits next: ``Seq.emit`` finds them in place)."""
        self.state.truncate(min(len(self.state), self.base + keep))


def _recover(view: TargetView, i: int, draft: int, q: FloatArray | None, greedy: bool,
             rng: np.random.Generator) -> int:
    """The token a rejected position i gets: the target's argmax, or a draw from norm(max(0, p − q))."""
    return view.argmax(i) if greedy else sample(residual(view.probs(i), q, draft), rng)


def _bonus(view: TargetView, n: int, greedy: bool, rng: np.random.Generator) -> int:
    return view.argmax(n) if greedy else sample(view.probs(n), rng)


class Verifier(Protocol):
    def verify(self, view: TargetView, drafts: list[int], qs: Sequence[FloatArray | None], greedy: bool,
               rng: np.random.Generator, force: Force | None = None) -> Verdict: ...


class StandardVerifier:
    """Token by token: greedy accepts the target's argmax; sampled accepts x with min(1, p(x)/q(x)).

    A sampled request draws one uniform per draft before the test, as vLLM's rejection sampler
    draws one per draft token of the step, so how many draws a step takes never depends on p.
    """

    def verify(self, view: TargetView, drafts: list[int], qs: Sequence[FloatArray | None], greedy: bool,
               rng: np.random.Generator, force: Force | None = None) -> Verdict:
        uniforms = None if greedy else rng.random(len(drafts)).tolist()
        for i, x in enumerate(drafts):
            ok = view.argmax(i) == x if uniforms is None else accepts(view.prob(i, x), qs[i], x, uniforms[i])
            if not ok and not (force is not None and force()):
                return Verdict(i, [*drafts[:i], _recover(view, i, x, qs[i], greedy, rng)])
        return Verdict(len(drafts), [*drafts, _bonus(view, len(drafts), greedy, rng)])


def _q_at(q: FloatArray | None, token: int) -> float:
    return 1.0 if q is None else float(q[token])


def joint_ratios(ps: Sequence[FloatArray], qs: Sequence[FloatArray | None], drafts: Sequence[int]) -> list[float]:
    """Block verification's running ratio p_i = min(p_(i-1) · p(x_i)/q(x_i), 1), p_0 = 1 (length γ+1)."""
    out = [1.0]
    for p, q, x in zip(ps, qs, drafts, strict=False):
        qx = _q_at(q, x)
        out.append(min(out[-1] * float(p[x]) / qx, 1.0) if qx > 0.0 else 0.0)
    return out


def residual_mass(ratio: float, p: FloatArray, q: FloatArray | None, draft: int) -> float:
    """Σ_x max(ratio · p(x) − q(x), 0); a one-hot q at ``draft`` in closed form."""
    if q is None:
        return ratio * (1.0 - float(p[draft])) + max(ratio * float(p[draft]) - 1.0, 0.0)
    return float(np.maximum(ratio * p - q, 0.0).sum())


def block_thresholds(ps: Sequence[FloatArray], qs: Sequence[FloatArray | None], drafts: Sequence[int]) -> list[float]:
    """h_1..h_γ: the block is cut after draft i when a uniform falls at or below h_i (the largest such i wins)."""
    gamma = len(drafts)
    ratios = joint_ratios(ps, qs, drafts)
    out = []
    for i in range(1, gamma + 1):
        if i < gamma:
            mass = residual_mass(ratios[i], ps[i], qs[i], drafts[i])
            denom = mass + 1.0 - ratios[i]
            out.append(mass / denom if denom > 0.0 else 1.0)
        else:
            out.append(ratios[gamma])
    return out


def block_residual(ratio: float, p: FloatArray, q: FloatArray | None, draft: int) -> FloatArray:
    """norm(max(ratio · p − q, 0)): where the block was cut, the next token is drawn from this."""
    if q is None:
        r = p.copy()
        r[draft] = 0.0
    else:
        r = np.maximum(ratio * p - q, 0.0)
    total = float(r.sum())
    if total <= 0.0:
        return p
    r /= total
    return r


class BlockVerifier:
    """Sun et al. (2024), as vLLM 0.33's ``block`` method: the drafts verified jointly, one uniform each."""

    def __init__(self) -> None:
        self.greedy_verifier = StandardVerifier()

    def verify(self, view: TargetView, drafts: list[int], qs: Sequence[FloatArray | None], greedy: bool,
               rng: np.random.Generator, force: Force | None = None) -> Verdict:
        if greedy:
            return self.greedy_verifier.verify(view, drafts, qs, greedy, rng, force)
        gamma = len(drafts)
        ps = [view.probs(i) for i in range(gamma)]
        thresholds = block_thresholds(ps, qs, drafts)
        tau = 0
        for i, h in enumerate(thresholds, start=1):
            if rng.random() <= h:
                tau = i
        if tau < gamma and force is not None and force():
            tau += 1
        if tau == gamma:
            return Verdict(gamma, [*drafts, sample(view.probs(gamma), rng)])
        ratio = joint_ratios(ps, qs, drafts)[tau]
        token = sample(block_residual(ratio, ps[tau], qs[tau], drafts[tau]), rng)
        return Verdict(tau, [*drafts[:tau], token])


class SyntheticVerifier:
    """vLLM's ``synthetic`` method: position i is accepted with its conditional rate, whatever the target says."""

    def __init__(self, rates: Sequence[float]) -> None:
        self.conditional = conditional_rates(rates)

    def verify(self, view: TargetView, drafts: list[int], qs: Sequence[FloatArray | None], greedy: bool,
               rng: np.random.Generator, force: Force | None = None) -> Verdict:
        for i, x in enumerate(drafts):
            if not rng.random() < self.conditional[i] and not (force is not None and force()):
                return Verdict(i, [*drafts[:i], _recover(view, i, x, qs[i], greedy, rng)])
        return Verdict(len(drafts), [*drafts, _bonus(view, len(drafts), greedy, rng)])


def top_k_entropy(p: FloatArray, top_k: int) -> float:
    """−Σ p log p over the ``top_k`` most likely tokens (FLy's gate)."""
    top = np.partition(p, -top_k)[-top_k:] if top_k < len(p) else p
    top = top[top > 0]
    return float(-(top * np.log(top)).sum())


class FlyVerifier:
    """vLLM 0.33's ``fly`` (Model Runner V1 form): a natively rejected draft is accepted anyway when the
    target's top-k entropy there is at least the threshold and the next ``window`` drafts are accepted natively."""

    def __init__(self, window: int, threshold: float, top_k: int) -> None:
        self.window, self.threshold, self.top_k = window, threshold, top_k

    def verify(self, view: TargetView, drafts: list[int], qs: Sequence[FloatArray | None], greedy: bool,
               rng: np.random.Generator, force: Force | None = None) -> Verdict:
        gamma = len(drafts)
        dists = [view.raw(i) if greedy else view.probs(i) for i in range(gamma)]
        if greedy:
            native = [view.argmax(i) == x for i, x in enumerate(drafts)]
        else:
            uniforms = rng.random(gamma)
            native = [accepts(float(dists[i][x]), qs[i], x, float(uniforms[i])) for i, x in enumerate(drafts)]
        for i, x in enumerate(drafts):
            ok = native[i] or (
                float(dists[i][x]) > 0.0 and _q_at(qs[i], x) > 0.0 and i + self.window < gamma
                and top_k_entropy(dists[i], self.top_k) >= self.threshold and all(native[i + 1: i + 1 + self.window]))
            if not ok and not (force is not None and force()):
                return Verdict(i, [*drafts[:i], _recover(view, i, x, qs[i], greedy, rng)])
        return Verdict(gamma, [*drafts, _bonus(view, gamma, greedy, rng)])


def build_verifier(method: str, *, rates: Sequence[float] | None = None, fly_window: int | None = None,
                   fly_threshold: float = 0.3, fly_top_k: int = 3) -> Verifier:
    """The verifier for vLLM's ``rejection_sample_method`` (settings already checked by ``spec_args``)."""
    if method == "block":
        return BlockVerifier()
    if method == "synthetic":
        assert rates is not None
        return SyntheticVerifier(rates)
    if method == "fly":
        assert fly_window is not None
        return FlyVerifier(fly_window, fly_threshold, fly_top_k)
    return StandardVerifier()
