"""Interpolated n-gram counts over a token stream, giving a full next-token distribution.

Contexts are numbered suffix by suffix (a context of length n is its length-(n-1) suffix's id
extended by one token to the left), so one pass of ``np.unique`` per order counts everything and
a lookup walks from the last token leftwards, stopping where the corpus never saw the context:
exactly the chain Witten-Bell interpolation needs. Distributions are cached per context level
(LRU), and the chain of levels per recent context tail, since sampling at T > 0 keeps visiting
new deep contexts whose shorter suffixes were seen before.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
SHARED_LEVELS = 2  # suffixes this short get their own cache (see NgramCounts._build)
DeepPart = tuple[float, dict[int, float]]  # the deep levels' scale and per-token sums (NgramCounts._deep_part)
_NO_SUMS: dict[int, float] = {}  # shared, never written


def _flat(typecode: str, values: npt.NDArray[np.int64] | npt.NDArray[np.float64]) -> array[Any]:
    """``values`` as a flat ``array.array`` (int64 -> "q", float64 -> "d"), copied as bytes."""
    out = array(typecode)
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64 if typecode == "q" else np.float64).tobytes())
    return out


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
        table, self._row_of, self._flat_tok, self._flat_cnt = self._flatten(smoothing)
        # The chain walk's keys and the deep levels' table and followers as flat Python arrays (the
        # same values, copied byte for byte), whose scalar reads and bisection cost a fraction of
        # numpy's per-call overhead: a walk reads one key per level, a deep chain a few dozen values.
        self._keys_at: list[array[int]] = [_flat("q", k) for k in self.keys]
        # Level n's keys are (level n−1 id)·vocab + token, sorted, so each shorter context's
        # extensions are a run of a few keys: where each run starts bounds the walk's bisection.
        self._starts: list[array[int]] = [array("q"), array("q")] + [
            _flat("q", np.searchsorted(self.keys[n], np.arange(len(self.keys[n - 1]) + 1, dtype=np.int64) * v))
            for n in range(2, len(self.keys))]
        self._has: list[bytes] = [b""] + [(t > 0).astype(np.uint8).tobytes() for t in self.types[1:]]
        self._rows = _flat("d", table)
        self._tok_at = _flat("q", self._flat_tok)
        self._cnt_at = _flat("d", self._flat_cnt)
        self._cache: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()
        self._cache_size = cache_size
        self._shared: OrderedDict[tuple[int, int], FloatArray] = OrderedDict()
        # The deep levels' part of a distribution, per deepest context: a few dozen floats where the
        # whole distribution is a vocabulary's, so many more are kept.
        self._deep: OrderedDict[tuple[int, int], DeepPart] = OrderedDict()
        self._deep_size = 16 * cache_size
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
        has, keys_at, starts = self._has, self._keys_at, self._starts
        chain = [(1, cid)] if has[1][cid] else []
        v = self.vocab_size
        for n in range(2, len(context) + 1):
            keys, start = keys_at[n], starts[n]
            key = cid * v + context[-n]
            lo, hi = start[cid], start[cid + 1]
            pos = lo if hi - lo == 1 else bisect_left(keys, key, lo, hi)
            if pos >= hi or keys[pos] != key:
                break
            cid = pos
            if has[n][cid]:
                chain.append((n, cid))
        return tuple(chain)

    def parts(self, context: Sequence[int]) -> tuple[FloatArray, float, dict[int, float]]:
        """The distribution ``dist(context)`` would return as (p, scale, sums): ``p * scale`` with
        ``sums[token]`` added at each listed token, the same operations in the same order, so one
        entry or the total can be had without building the array (``p`` is cached: do not modify it)."""
        chain = self.chain(context)
        if not chain:
            return self.base, 1.0, _NO_SUMS
        hit = self._cache.get(chain[-1])
        if hit is not None:
            self._cache.move_to_end(chain[-1])
            return hit, 1.0, _NO_SUMS
        split = self._split(chain)
        p = self._shared_dist(chain, split)
        if split == len(chain):
            return p, 1.0, _NO_SUMS
        scale, sums = self._deep_part(chain, split)
        return p, scale, sums

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
        of its own, have few followers each: their part (see ``_deep_part``) is added in one pass.
        """
        split = self._split(chain)
        p = self._shared_dist(chain, split)
        if split < len(chain):
            scale, sums = self._deep_part(chain, split)
            p = p * scale
            for token, w in sums.items():
                p[token] += w
        self._remember(self._cache, chain[-1], p)
        return p

    @staticmethod
    def _split(chain: tuple[tuple[int, int], ...]) -> int:
        split = 0
        while split < len(chain) and chain[split][0] <= SHARED_LEVELS:
            split += 1
        return split

    def _shared_dist(self, chain: tuple[tuple[int, int], ...], split: int) -> FloatArray:
        """The distribution of the chain's shared levels (``chain[:split]``), cached."""
        if not split:
            return self.base
        key = chain[split - 1]
        hit = self._shared.get(key)
        if hit is not None:
            self._shared.move_to_end(key)
            return hit
        p = self.base
        row_of, rows, tok, cnt = self._row_of, self._rows, self._flat_tok, self._flat_cnt
        for level, lid in chain[:split]:
            r = 4 * (row_of[level - 1] + lid)
            a, b, total, lam = int(rows[r]), int(rows[r + 1]), rows[r + 2], rows[r + 3]
            p = p * (1.0 - lam)
            p[tok[a:b]] += lam * cnt[a:b] / total
        self._remember(self._shared, key, p)
        return p

    def _deep_part(self, chain: tuple[tuple[int, int], ...], split: int) -> DeepPart:
        """The deep levels' (scale, sums), cached per deepest context: the shared distribution is
        scaled by every deep level's (1 − λ), and each deep follower adds its count times its level's
        λ / total times the (1 − λ) of the deeper levels.

        A deep level has a few followers, so their weights are summed per token in Python floats:
        deepest level first, from 0.0, then added once to the scaled distribution's entry, which are
        the same sums in the same order as a ``bincount`` over the followers added to it.
        """
        key = chain[-1]
        hit = self._deep.get(key)
        if hit is not None:
            self._deep.move_to_end(key)
            return hit
        row_of, rows, tok, cnt = self._row_of, self._rows, self._tok_at, self._cnt_at
        scale = 1.0
        sums: dict[int, float] = {}
        for level, lid in reversed(chain[split:]):
            r = 4 * (row_of[level - 1] + lid)
            lam = rows[r + 3]
            c = scale * lam / rows[r + 2]
            scale *= 1.0 - lam
            for j in range(int(rows[r]), int(rows[r + 1])):
                token = tok[j]
                w = cnt[j] * c
                sums[token] = sums[token] + w if token in sums else w
        part = self._deep[key] = (scale, sums)
        if len(self._deep) > self._deep_size:
            self._deep.popitem(last=False)
        return part

    def _remember(self, cache: OrderedDict[tuple[int, int], FloatArray], key: tuple[int, int], p: FloatArray) -> None:
        p.flags.writeable = False
        cache[key] = p
        if len(cache) > self._cache_size:
            cache.popitem(last=False)
