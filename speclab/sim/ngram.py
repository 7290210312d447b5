"""Interpolated n-gram counts over a token stream, giving a full next-token distribution.

Contexts are numbered suffix by suffix (a context of length n is its length-(n-1) suffix's id
extended by one token to the left), so one pass of ``np.unique`` per order counts everything and
a lookup walks from the last token leftwards, stopping where the corpus never saw the context:
exactly the chain Witten-Bell interpolation needs. Distributions are cached per deepest context.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class NgramCounts:
    """Counts of every n-gram up to ``order`` in ``stream``; ``dist(context)`` interpolates them."""

    def __init__(self, stream: IntArray, vocab_size: int, order: int, smoothing: float,
                 cache_size: int = 2048) -> None:
        self.vocab_size = vocab_size
        self.order = order
        self.smoothing = smoothing
        v = vocab_size
        stream = stream.astype(np.int64)
        unigram = np.bincount(stream, minlength=v).astype(np.float64)
        self.base: FloatArray = (unigram + 0.05) / (unigram.sum() + 0.05 * v)
        self.keys: list[IntArray] = [np.zeros(0, np.int64), np.arange(v, dtype=np.int64)]
        self.indptr: list[IntArray] = [np.zeros(0, np.int64)]
        self.follow_tok: list[IntArray] = [np.zeros(0, np.int64)]
        self.follow_cnt: list[FloatArray] = [np.zeros(0)]
        self.totals: list[FloatArray] = [np.zeros(0)]
        self.types: list[FloatArray] = [np.zeros(0)]
        ids = stream.copy()  # ids[i]: id of the length-n context ending at position i
        valid_from = 0
        for n in range(1, order):
            if n > 1:
                key = np.full(len(stream), -1, np.int64)
                key[n - 1:] = ids[n - 1:] * v + stream[: len(stream) - n + 1]
                uniq = np.unique(key[n - 1:])
                self.keys.append(uniq)
                ids = np.searchsorted(uniq, key).astype(np.int64)
                valid_from = n - 1
            ctx = ids[valid_from:-1]
            nxt = stream[valid_from + 1:]
            pair, cnt = np.unique(ctx * v + nxt, return_counts=True)
            pctx, ptok = pair // v, pair % v
            num_ctx = len(self.keys[n])
            indptr = np.searchsorted(pctx, np.arange(num_ctx + 1)).astype(np.int64)
            self.indptr.append(indptr)
            self.follow_tok.append(ptok.astype(np.int64))
            self.follow_cnt.append(cnt.astype(np.float64))
            self.totals.append(np.bincount(pctx, weights=cnt, minlength=num_ctx).astype(np.float64))
            self.types.append(np.diff(indptr).astype(np.float64))
        self._cache: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()
        self._cache_size = cache_size

    def deepest(self, context: Sequence[int]) -> tuple[int, int]:
        """(n, id) of the longest suffix of ``context`` (up to order-1 tokens) seen with a follower."""
        if not context:
            return 0, 0
        cid = int(context[-1])
        best = (1, cid) if self.types[1][cid] > 0 else (0, 0)
        limit = min(self.order - 1, len(context))
        v = self.vocab_size
        for n in range(2, limit + 1):
            keys = self.keys[n]
            key = cid * v + int(context[-n])
            pos = int(np.searchsorted(keys, key))
            if pos >= len(keys) or keys[pos] != key:
                break
            cid = pos
            if self.types[n][cid] > 0:
                best = (n, cid)
        return best

    def dist(self, context: Sequence[int]) -> FloatArray:
        """The interpolated next-token distribution (a cached array: do not modify it)."""
        n, cid = self.deepest(context)
        return self.dist_at(n, cid, context)

    def dist_at(self, n: int, cid: int, context: Sequence[int]) -> FloatArray:
        key = (n, cid)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        p = self.base.copy()
        chain = self._chain(n, context)
        for level, lid in chain:
            lo, hi = self.indptr[level][lid], self.indptr[level][lid + 1]
            total, types = self.totals[level][lid], self.types[level][lid]
            lam = total / (total + self.smoothing * types)
            p *= 1.0 - lam
            p[self.follow_tok[level][lo:hi]] += lam * self.follow_cnt[level][lo:hi] / total
        p.flags.writeable = False
        self._cache[key] = p
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return p

    def _chain(self, n: int, context: Sequence[int]) -> list[tuple[int, int]]:
        chain: list[tuple[int, int]] = []
        if n == 0:
            return chain
        cid = int(context[-1])
        v = self.vocab_size
        for level in range(1, n + 1):
            if level > 1:
                cid = int(np.searchsorted(self.keys[level], cid * v + int(context[-level])))
            if self.types[level][cid] > 0:
                chain.append((level, cid))
        return chain
