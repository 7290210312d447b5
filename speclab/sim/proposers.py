"""Draft proposers: a draft model sharing the target's tokenizer, one with its own, and n-gram lookup."""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .lm import SimLM
from .ngram import FloatArray
from .sampling import adjust, is_greedy, sample
from .sequence import Seq
from .tokenizer import SimTokenizer

Proposal = tuple[list[int], list[FloatArray | None]]  # draft tokens, q per token (None: one-hot)


class Proposer(Protocol):
    uses_draft_model: bool

    def propose(self, seq: Seq, k: int) -> Proposal: ...


class DraftModelProposer:
    """A smaller model over the same vocabulary; samples its drafts (argmax when greedy)."""

    uses_draft_model = True

    def __init__(self, lm: SimLM) -> None:
        self.lm = lm

    def propose(self, seq: Seq, k: int) -> Proposal:
        state = seq.draft_state
        assert state is not None
        if len(state) > len(seq.tokens):
            state.truncate(len(seq.tokens))
        state.extend(seq.tokens[len(state):])
        base = len(state)
        params = seq.req.sampling
        drafts: list[int] = []
        qs: list[FloatArray | None] = []
        for _ in range(k):
            if is_greedy(params):
                token, q = self.lm.greedy(state), None
            else:
                q = adjust(self.lm.scores(state), params.temperature, params.top_k, params.top_p, inplace=True)
                token = sample(q, seq.rng)
            drafts.append(token)
            qs.append(q)
            state.push(token)
        state.truncate(base)
        return drafts, qs


class MisalignedDraftProposer:
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


class NgramProposer:
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
