"""Interpolated n-gram counts over a token stream, giving a full next-token distribution.

Contexts are numbered suffix by suffix (a context of length n is its length-(n-1) suffix's id
extended by one token to the left), so one pass of ``np.unique`` per order counts everything and
a lookup walks from the last token leftwards, stopping where the corpus never saw the context:
exactly the chain Witten-Bell interpolation needs. Distributions are cached per context level
(LRU), and the chain of levels per recent context tail, since sampling at T > 0 keeps visiting
new deep contexts whose shorter suffixes were seen before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
SHARED_LEVELS = 2  # suffixes this short get their own cache (see NgramCounts._build)


class NgramCounts:
    """Counts of every n-gram up to ``order`` in ``stream``; ``dist(context)`` interpolates them."""

    def __init__(self, stream: IntArray, vocab_size: int, order: int, smoothing: float,
                 cache_size: int = 2048, chains_limit: int = 100_000) -> None:
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
        self._table, self._row_of, self._flat_tok, self._flat_cnt = self._flatten(smoothing)
        self._cache: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()
        self._cache_size = cache_size
        self._shared: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()
        self._chains: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        self._chains_limit = chains_limit

    def _flatten(self, smoothing: float) -> tuple[FloatArray, list[int], IntArray, FloatArray]:
        """Every level's contexts in one table, a row each: (follower start, end, total, λ), the
        followers in one array, so a chain's levels are read with one gather instead of a few
        scalar reads per level. λ is Witten-Bell's total / (total + smoothing · types)."""
        rows: list[FloatArray] = []
        row_of = [0]
        follow_at = 0
        for n in range(1, self.order):
            total, types = self.totals[n], self.types[n]
            denom = total + smoothing * types
            lam = np.divide(total, denom, out=np.zeros_like(total), where=denom > 0)
            ptr = self.indptr[n].astype(np.float64) + follow_at
            rows.append(np.stack([ptr[:-1], ptr[1:], total, lam], axis=1))
            row_of.append(row_of[-1] + len(total))
            follow_at += len(self.follow_tok[n])
        table = np.concatenate(rows) if rows else np.zeros((0, 4))
        tok = np.concatenate(self.follow_tok[1:]) if self.order > 1 else np.zeros(0, np.int64)
        cnt = np.concatenate(self.follow_cnt[1:]) if self.order > 1 else np.zeros(0)
        return table, row_of, tok, cnt

    def deepest(self, context: Sequence[int]) -> tuple[int, int]:
        """(n, id) of the longest suffix of ``context`` (up to order-1 tokens) seen with a follower."""
        chain = self.chain(context)
        return chain[-1] if chain else (0, 0)

    def chain(self, context: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """(level, id) of every suffix of ``context`` seen with a follower, shortest first (memoised)."""
        key = tuple(context[-(self.order - 1):]) if self.order > 1 else ()
        hit = self._chains.get(key)
        if hit is None:
            if len(self._chains) >= self._chains_limit:
                self._chains.clear()
            hit = self._chains[key] = self._walk(key)
        return hit

    def _walk(self, context: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        if not context:
            return ()
        cid = context[-1]
        chain = [(1, cid)] if self.types[1][cid] > 0 else []
        v = self.vocab_size
        for n in range(2, len(context) + 1):
            keys = self.keys[n]
            key = cid * v + context[-n]
            pos = int(keys.searchsorted(key))
            if pos >= len(keys) or keys[pos] != key:
                break
            cid = pos
            if self.types[n][cid] > 0:
                chain.append((n, cid))
        return tuple(chain)

    def dist(self, context: Sequence[int]) -> FloatArray:
        """The interpolated next-token distribution (a cached array: do not modify it)."""
        chain = self.chain(context)
        if not chain:
            return self.base
        hit = self._cache.get(chain[-1])
        if hit is not None:
            self._cache.move_to_end(chain[-1])
            return hit
        return self._build(chain)

    def _build(self, chain: tuple[tuple[int, int], ...]) -> FloatArray:
        """Interpolate the chain: p_n = (1 − λ_n)·p_(n−1) + λ_n·followers_n, from the unigram base up.

        The short suffixes (up to ``SHARED_LEVELS`` tokens) are shared by many contexts and kept in
        their own cache. The deeper levels, where every sequence sampled at T > 0 soon has a context
        of its own, have few followers each, so they are added in one sparse pass.
        """
        split = 0
        while split < len(chain) and chain[split][0] <= SHARED_LEVELS:
            split += 1
        p = self.base
        deep = chain[split:]
        row_of = self._row_of
        levels = self._table[[row_of[level - 1] + lid for level, lid in chain]].tolist()
        tok, cnt = self._flat_tok, self._flat_cnt
        if split:
            key = chain[split - 1]
            hit = self._shared.get(key)
            if hit is None:
                for lo, hi, total, lam in levels[:split]:
                    a, b = int(lo), int(hi)
                    p = p * (1.0 - lam)
                    p[tok[a:b]] += lam * cnt[a:b] / total
                self._remember(self._shared, key, p)
            else:
                self._shared.move_to_end(key)
                p = hit
        if deep:
            scale = 1.0
            coeffs: list[float] = []
            tokens: list[IntArray] = []
            counts: list[FloatArray] = []
            sizes: list[int] = []
            for lo, hi, total, lam in reversed(levels[split:]):
                a, b = int(lo), int(hi)
                coeffs.append(scale * lam / total)
                scale *= 1.0 - lam
                tokens.append(tok[a:b])
                counts.append(cnt[a:b])
                sizes.append(b - a)
            p = self._add_followers(p * scale, tokens, np.concatenate(counts) * np.array(coeffs).repeat(sizes))
        self._remember(self._cache, chain[-1], p)
        return p

    def _add_followers(self, p: FloatArray, tokens: list[IntArray], weights: FloatArray) -> FloatArray:
        """``p + bincount(tokens, weights)`` over the vocabulary, summed over the shallowest level's
        followers only (in place on ``p``, a fresh array).

        A deeper context's followers are among its suffix's, so every token is one of the last
        (shallowest) level's sorted followers: the per-token sums are bincount's, in the same order,
        and every other token gets + 0.0. Should that ever not hold, the full bincount is used.
        """
        shallow = tokens[-1]
        if len(tokens) == 1:
            p[shallow] += weights  # one level: each token once, and bincount's 0.0 + w is w
            return p
        flat = np.concatenate(tokens)
        at = shallow.searchsorted(flat)
        if not (at < len(shallow)).all() or not (shallow[at] == flat).all():
            return p + np.bincount(flat, weights=weights, minlength=self.vocab_size)
        p[shallow] += np.bincount(at, weights=weights, minlength=len(shallow))
        return p

    def _remember(self, cache: OrderedDict[tuple[int, int], FloatArray], key: tuple[int, int], p: FloatArray) -> None:
        p.flags.writeable = False
        cache[key] = p
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
