"""Suffix decoding (Arctic Inference, as vLLM 0.33 runs it): a prompt tree per request and a global tree.

The per-request tree holds the prompt and the response so far; the global tree holds the responses
of earlier requests (the most recent ``max_cached_requests``, FIFO; 0 switches it off). For every
match length m from 1 up, the last m tokens are matched in a tree; from there the draft follows the
most frequent continuation, each token's probability the product of continuation frequencies, until
that falls below ``min_token_prob``, the draft reaches ``min(k, m · max_spec_factor)`` tokens or
match plus draft reach ``max_tree_depth``. The draft scoring highest (the sum of its probabilities;
ties to the longer match) wins, the prompt tree's unless the global tree's scores strictly higher.

The trees are kept as token arrays searched by position (a suffix tree's counts are exactly the
occurrence counts used here). One simplification: a response joins the global tree when its request
ends, where Arctic adds it token by token, so concurrent requests see each other a little later.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .api import SuffixSettings
from .proposers import Proposal
from .sequence import Seq

IntArray = npt.NDArray[np.int64]
_GAP = -1  # between responses in the global buffer, and over evicted ones


@dataclass(slots=True)
class Draft:
    tokens: list[int] = field(default_factory=list)
    score: float = 0.0


def _speculate(buf: IntArray, ends: IntArray, context: IntArray, k: int, settings: SuffixSettings,
               vocab: int) -> Draft:
    """The best draft over every match length; ``ends`` are the positions after each occurrence of
    ``context[-1]`` (candidates for a match of length 1)."""
    best = Draft()
    depth = settings.max_tree_depth
    n = len(buf)
    previous = best_limit = -1
    for m in range(1, len(context)):
        if m > 1:
            ends = ends[ends - m >= 0]
            ends = ends[buf[ends - m] == context[-m]]
        continuing = ends[ends < n]
        continuing = continuing[buf[continuing] != _GAP]
        if not len(continuing):
            break
        limit = min(k, int(m * settings.max_spec_factor + 1e-6), depth - m)
        if len(ends) == previous and limit == best_limit:
            continue
        previous, best_limit = len(ends), limit
        draft = _path(buf, ends, limit, settings.min_token_prob, vocab)
        if draft.score >= best.score:
            best = draft
    return best


def _path(buf: IntArray, ends: IntArray, limit: int, min_prob: float, vocab: int) -> Draft:
    """Follow the most frequent continuation from the occurrences ending at ``ends``."""
    draft = Draft()
    prob = 1.0
    n = len(buf)
    while len(draft.tokens) < limit:
        nodes = len(ends)
        cont = ends[ends < n]
        cont = cont[buf[cont] != _GAP]
        if not len(cont):
            break
        counts = np.bincount(buf[cont], minlength=vocab)
        token = int(np.argmax(counts))
        prob *= float(counts[token]) / nodes
        if prob < min_prob:
            break
        draft.tokens.append(token)
        draft.score += prob
        ends = cont[buf[cont] == token] + 1
    return draft


class _Growing:
    """An int64 array appended to in amortised O(1) (capacity doubles)."""

    __slots__ = ("data", "size")

    def __init__(self) -> None:
        self.data: IntArray = np.zeros(16, np.int64)
        self.size = 0

    def extend(self, values: IntArray) -> None:
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.zeros(max(need, 2 * len(self.data)), np.int64)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size: need] = values
        self.size = need

    def view(self) -> IntArray:
        return self.data[: self.size]


class GlobalTree:
    """Earlier responses in one buffer, separated by gaps, with the positions of every token."""

    def __init__(self, vocab: int, max_requests: int) -> None:
        self.vocab, self.max_requests = vocab, max_requests
        self._reset()

    def _reset(self) -> None:
        self.buf = _Growing()
        self.spans: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.positions: dict[int, _Growing] = {}
        self.dead = 0

    def add(self, request_id: str, tokens: list[int]) -> None:
        if self.max_requests == 0 or not tokens:
            return
        if request_id in self.spans:
            self._evict(request_id)
        values = np.asarray(tokens, np.int64)
        start = self.buf.size + 1
        self.buf.extend(np.concatenate([[_GAP], values]))
        self.spans[request_id] = (start, start + len(values))
        order = np.argsort(values, kind="stable")
        distinct, first = np.unique(values[order], return_index=True)
        for value, lo, hi in zip(distinct, first, [*first[1:], len(values)], strict=True):
            self.positions.setdefault(int(value), _Growing()).extend(start + order[lo:hi])
        while len(self.spans) > self.max_requests:
            self._evict(next(iter(self.spans)))
        if self.dead > self.buf.size // 2:
            live = [(rid, self.buf.view()[lo:hi].tolist()) for rid, (lo, hi) in self.spans.items()]
            self._reset()
            for rid, kept in live:
                self.add(rid, kept)

    def _evict(self, request_id: str) -> None:
        lo, hi = self.spans.pop(request_id)
        self.buf.view()[lo:hi] = _GAP
        self.dead += hi - lo + 1

    def speculate(self, context: IntArray, k: int, settings: SuffixSettings) -> Draft:
        at = self.positions.get(int(context[-1]))
        if at is None or not self.spans:
            return Draft()
        buf = self.buf.view()
        where = at.view()
        where = where[buf[where] == context[-1]]
        return _speculate(buf, where + 1, context, k, settings, self.vocab)


class SuffixProposer:
    """vLLM's ``suffix`` method over a prompt tree per request and one global tree."""

    uses_draft_model = False

    def __init__(self, settings: SuffixSettings, vocab: int, max_model_len: int) -> None:
        self.settings, self.vocab, self.max_model_len = settings, vocab, max_model_len
        self.global_tree = GlobalTree(vocab, settings.max_cached_requests)

    def start(self, seq: Seq) -> None:
        return None

    def finish(self, seq: Seq) -> None:
        self.global_tree.add(seq.req.request_id, seq.output)

    def propose(self, seq: Seq, k: int) -> Proposal:
        arr = np.asarray(seq.tokens, dtype=np.int64)
        k = min(k, self.max_model_len - len(arr) - 1)
        if k <= 0:
            return [], []
        context = arr[-self.settings.max_tree_depth:]
        local = _speculate(arr, np.flatnonzero(arr == context[-1]) + 1, context, k, self.settings, self.vocab)
        other = self.global_tree.speculate(context, k, self.settings)
        best = other if other.score > local.score else local
        return best.tokens, [None] * len(best.tokens)
