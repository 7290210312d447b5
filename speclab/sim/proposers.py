"""Draft proposers: a draft model (same or own tokenizer), a head on the target, and n-gram lookup.

A proposal is the draft tokens and, per token, the distribution it was drawn from (``None``: a
deterministic proposal, one-hot). vLLM 0.33 drafts greedily by default (``draft_sample_method``
``greedy``: the argmax, treated as one-hot by the rejection test), which is what lowers acceptance
as temperature rises; ``probabilistic`` samples the draft's own adjusted distribution and keeps it.
Greedy requests always draft the argmax.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .heads import DraftHead
from .lm import ContextState, SimLM
from .ngram import FloatArray
from .sampling import adjust, is_greedy, sample
from .sequence import Seq
from .tokenizer import SimTokenizer

Proposal = tuple[list[int], list[FloatArray | None]]  # draft tokens, q per token (None: one-hot)


class Proposer(Protocol):
    uses_draft_model: bool  # runs forward passes (priced by the step model) rather than a lookup

    def start(self, seq: Seq) -> None: ...
    def propose(self, seq: Seq, k: int) -> Proposal: ...
    def finish(self, seq: Seq) -> None: ...


class _Stateless:
    def start(self, seq: Seq) -> None:
        return None

    def finish(self, seq: Seq) -> None:
        return None


def _draw(scores: FloatArray, seq: Seq, probabilistic: bool) -> tuple[int, FloatArray | None]:
    """One draft token from unnormalised ``scores``: the argmax (one-hot), or a draw from the adjusted q."""
    params = seq.req.sampling
    if not probabilistic or is_greedy(params):
        return int(scores.argmax()), None
    q = adjust(scores, params.temperature, params.top_k, params.top_p, inplace=True)
    return sample(q, seq.rng), q


def _draft_from(state: ContextState, k: int, seq: Seq, probabilistic: bool,
                scores_at: SimLM | DraftHead, *, keep: bool = False) -> Proposal:
    """``k`` drafts pushed onto ``state`` in turn; taken off again unless ``keep``."""
    base = len(state)
    drafts: list[int] = []
    qs: list[FloatArray | None] = []
    for depth in range(k):
        scores = scores_at.scores(state) if isinstance(scores_at, SimLM) else scores_at.scores(state, depth)
        token, q = _draw(scores, seq, probabilistic)
        drafts.append(token)
        qs.append(q)
        state.push(token)
    if not keep:
        state.truncate(base)
    return drafts, qs


class DraftModelProposer(_Stateless):
    """A smaller model over the same vocabulary, with a context state of its own."""

    uses_draft_model = True

    def __init__(self, lm: SimLM, *, probabilistic: bool = False) -> None:
        self.lm, self.probabilistic = lm, probabilistic

    def start(self, seq: Seq) -> None:
        seq.draft_state = self.lm.state(seq.tokens)
        seq.draft_base = len(seq.tokens)

    def propose(self, seq: Seq, k: int) -> Proposal:
        """The drafts stay on the draft's state: the ones the target accepted are already in place
        at the next proposal, which takes off only the rest (``seq.draft_base``: where they start)."""
        state, tokens = seq.draft_state, seq.tokens
        assert state is not None
        have, same = state.tokens, seq.draft_base
        end = min(len(have), len(tokens))
        while same < end and have[same] == tokens[same]:
            same += 1
        if len(state) > same:
            state.truncate(same)
        state.extend(tokens[same:])
        seq.draft_base = len(tokens)
        return _draft_from(state, k, seq, self.probabilistic, self.lm, keep=True)


class HeadProposer(_Stateless):
    """An EAGLE / EAGLE-3 / MTP head: drafts from the target's own state (no state of its own)."""

    uses_draft_model = True

    def __init__(self, head: DraftHead, *, probabilistic: bool = False) -> None:
        self.head, self.probabilistic = head, probabilistic

    def propose(self, seq: Seq, k: int) -> Proposal:
        return _draft_from(seq.target_state, k, seq, self.probabilistic, self.head)


class MisalignedDraftProposer(_Stateless):
    """A draft with its own tokenizer: re-tokenize the recent text, draft greedily, map back."""

    uses_draft_model = True
    window = 48

    def __init__(self, lm: SimLM, target_tokenizer: SimTokenizer) -> None:
        self.lm, self.target = lm, target_tokenizer

    def propose(self, seq: Seq, k: int) -> Proposal:
        context = self.target.decode(seq.tokens[-self.window:])
        draft_tok = self.lm.tokenizer
        ids = draft_tok.encode(context)
        state = self.lm.state(ids)
        for _ in range(k + 2):
            token = self.lm.greedy(state)
            if token == draft_tok.eos_token_id:
                break
            state.push(token)
        full = draft_tok.decode(state.tokens)
        known = draft_tok.decode(ids)
        continuation = full[len(known):]
        mapped = self.target.encode(continuation)[:k] if continuation else []
        return mapped, [None] * len(mapped)


class NgramProposer(_Stateless):
    """vLLM's prompt lookup: the tokens that followed the last earlier match of the last n tokens."""

    uses_draft_model = False

    def __init__(self, lookup_min: int, lookup_max: int) -> None:
        self.lookup_min, self.lookup_max = lookup_min, lookup_max

    def propose(self, seq: Seq, k: int) -> Proposal:
        arr = np.asarray(seq.tokens, dtype=np.int64)
        length = len(arr)
        for n in range(min(self.lookup_max, length - 1), self.lookup_min - 1, -1):
            windows = sliding_window_view(arr[:-1], n)
            hits = np.flatnonzero((windows == arr[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                drafts = [int(t) for t in arr[start: start + k]]
                return drafts, [None] * len(drafts)
        return [], []
