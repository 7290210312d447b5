"""The simulator's language models: an n-gram core times a copy boost.

An n-gram model alone cannot copy a city or a ticker from the prompt into a JSON call, which is
the one thing real models do that the golden set depends on. So each model multiplies its n-gram
distribution by two copy features (a product of experts): a boost for word tokens already in the
context, and a stronger one for the token that followed the last occurrence of the current
bigram (an "induction" feature). Both compare tokens by their text without the leading-space
marker, so ``Tokyo`` after a quote copies `` Tokyo`` from the prompt.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .corpus import CORPUS_PATH, load_corpus
from .ngram import FloatArray, IntArray, NgramCounts
from .tokenizer import SimTokenizer, load_tokenizer, model_config


class ContextState:
    """One sequence as one model sees it, with its copy features kept up to date; undoable.

    Its bookkeeping is in plain Python lists (indexed per token, where numpy scalars cost more than
    they save); ``last_copy`` keeps the last copied prompt position per output token, so the pointer
    needs no scan, and the pointer's (token, weight) pairs are kept per start position.
    """

    __slots__ = ("bigram_next", "canon", "copies", "last_copy", "lm", "pointers", "present", "prompt_len",
                 "prompt_pos", "tokens", "turn_start", "weights")

    def __init__(self, lm: SimLM, tokens: list[int]) -> None:
        self.lm = lm
        self.tokens: list[int] = []
        self.canon: list[int] = []
        self.present: list[int] = [0] * lm.num_canon
        self.weights: FloatArray = np.ones(lm.vocab_size)
        self.bigram_next: dict[tuple[int, int], list[int]] = {}
        self.prompt_len = 0
        self.prompt_pos: dict[int, int] = {}
        self.copies: list[int] = []  # prompt position of each output token (-1: not copied)
        self.last_copy: list[int] = []  # the last copied prompt position up to each output token (-1: none)
        self.pointers: dict[int, list[tuple[int, float]]] = {}
        for token in tokens:
            self.push(token)
        self.prompt_len = len(tokens)
        self.turn_start = 0
        for i, token in enumerate(tokens):
            if token == lm.turn_marker:
                self.turn_start = i + 1
        boostable = lm.boostable_list
        for i in range(self.turn_start, len(tokens)):
            if boostable[self.canon[i]]:
                self.prompt_pos[self.canon[i]] = i
        self.copies = []
        self.last_copy = []

    def __len__(self) -> int:
        return len(self.tokens)

    def push(self, token: int) -> None:
        lm, canon, i = self.lm, self.canon, len(self.tokens)
        c = lm.canon_list[token]
        if i >= 2:
            key = (canon[i - 2], canon[i - 1])
            seen = self.bigram_next.get(key)
            if seen is None:
                self.bigram_next[key] = [i]
            else:
                seen.append(i)
        if self.prompt_len:
            pos = self.prompt_pos.get(c, -1)
            self.copies.append(pos)
            last = self.last_copy
            last.append(pos if pos >= 0 or not last else last[-1])
        self.tokens.append(token)
        canon.append(c)
        if lm.boostable_list[c]:
            present = self.present[c] + 1
            self.present[c] = present
            if present == 1:
                weights, weight = self.weights, lm.copy_weight
                for j in lm.member_lists[c]:
                    weights[j] = weight

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.push(token)

    def truncate(self, length: int) -> None:
        lm, canon, tokens = self.lm, self.canon, self.tokens
        if length < self.prompt_len:
            self.pointers.clear()  # the pointer reads the prompt's tokens
        boostable = lm.boostable_list
        while len(tokens) > length:
            i = len(tokens) - 1
            tokens.pop()
            c = canon.pop()
            if self.prompt_len and i >= self.prompt_len:
                self.copies.pop()
                self.last_copy.pop()
            if i >= 2:
                self.bigram_next[(canon[i - 2], canon[i - 1])].pop()
            if boostable[c]:
                present = self.present[c] - 1
                self.present[c] = present
                if present == 0:
                    weights = self.weights
                    for j in lm.member_lists[c]:
                        weights[j] = 1.0

    def induction(self) -> int:
        """Canonical id of the token that followed the last earlier occurrence of the current bigram."""
        canon, n = self.canon, len(self.canon)
        if n >= 2:
            seen = self.bigram_next.get((canon[n - 2], canon[n - 1]))
            if seen:
                return canon[seen[-1]]
        return -1

    def pointer_start(self) -> int:
        """Prompt position after which copying continues: the last copied token, else the user turn."""
        last = self.last_copy
        if last and last[-1] >= 0:
            return last[-1]
        return self.turn_start - 1

    def pointer_pairs(self) -> list[tuple[int, float]]:
        """(token id, weight) of every boost the pointer applies now, in the order it applies them."""
        start = self.pointer_start()
        pairs = self.pointers.get(start)
        if pairs is None:
            lm, canon = self.lm, self.canon
            pairs = []
            for offset, weight in enumerate(lm.pointer_weights, start=1):
                pos = start + offset
                if pos >= self.prompt_len:
                    break
                if lm.boostable_list[canon[pos]]:
                    pairs.extend((j, weight) for j in lm.member_lists[canon[pos]])
            self.pointers[start] = pairs
        return pairs


class SimLM:
    """A named simulator model: tokenizer, n-gram counts over its share of the corpus, copy boost."""

    def __init__(self, name: str, tokenizer: SimTokenizer, stream: IntArray, spec: dict[str, Any]) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.order = int(spec["order"])
        self.counts = NgramCounts(stream, self.vocab_size, self.order, float(spec["smoothing"]))
        self.copy_weight = float(np.exp(spec["copy_boost"]))
        self.induction_weight = float(np.exp(spec["induction_boost"]))
        window = int(spec.get("pointer_window", 8))
        self.pointer_weights = [float(np.exp(spec["pointer_boost"] * (1.0 - i / window))) for i in range(window)]
        marker = "[INST]" if tokenizer.bos_token == "<s>" else "<|user|>"
        self.turn_marker = tokenizer.token_id(marker)
        forms: dict[str, int] = {}
        canon_of = np.zeros(self.vocab_size, np.int64)
        for token_id in range(self.vocab_size):
            text = tokenizer.id_to_token(token_id) or ""
            form = text if token_id in tokenizer.special_ids else text.lstrip("Ġ▁")
            canon_of[token_id] = forms.setdefault(form, len(forms))
        self.canon_of = canon_of
        self.num_canon = len(forms)
        self.boostable = np.zeros(self.num_canon, bool)
        for form, cid in forms.items():
            self.boostable[cid] = any(ch.isalnum() for ch in form) and not form.startswith("<")
        order_idx = np.argsort(canon_of, kind="stable")
        bounds = np.searchsorted(canon_of[order_idx], np.arange(self.num_canon + 1))
        self.members = [order_idx[bounds[c]: bounds[c + 1]] for c in range(self.num_canon)]
        self.canon_list: list[int] = canon_of.tolist()
        self.boostable_list: list[bool] = self.boostable.tolist()
        self.member_lists: list[list[int]] = [m.tolist() for m in self.members]

    def state(self, tokens: list[int]) -> ContextState:
        return ContextState(self, tokens)

    def scores(self, state: ContextState) -> FloatArray:
        """Unnormalised next-token scores after ``state`` (a fresh array the caller may modify)."""
        return self.copy_features(state, self.counts.dist(state.tokens) * state.weights, weighted=True)

    def copy_features(self, state: ContextState, scores: FloatArray, *, weighted: bool = False) -> FloatArray:
        """``scores`` times this model's copy features read from ``state`` (in place; returned).

        ``weighted``: the context-word boost is already in (``scores`` was built with it). A boost
        touches one or two tokens, so it is applied token by token (the same products, in the same
        order, as a fancy-indexed multiply, without its per-call cost).
        """
        if not weighted:
            scores *= state.weights
        ind = state.induction()
        if ind >= 0 and self.boostable_list[ind]:
            weight = self.induction_weight
            for j in self.member_lists[ind]:
                scores[j] *= weight
        for j, weight in state.pointer_pairs():
            scores[j] *= weight
        return scores

    def prob_of(self, state: ContextState, token: int) -> float:
        """``scores(state)[token]`` over the scores' total, without building the scores.

        The token's score is the same products, in the same order, as ``scores`` computes it. The
        total is summed in another order (a dot product of the shared distribution with the weights,
        then each sparse entry's and each boosted entry's difference), so it can differ from the
        array's in the last bits; an accept test drawn against it decides the same but for a chance
        of about 1e-16. A context word's weight is read from ``state.present`` (it is
        ``state.weights[j]``: the copy weight where the token's canonical form is in the context).
        """
        p, scale, sums = self.counts.parts(state.tokens)
        present, canon, copy_weight = state.present, self.canon_list, self.copy_weight

        def entry(j: int) -> float:  # entry j times its context-word weight, as ``scores`` has it before the boosts
            d = p.item(j) * scale
            s = sums.get(j)
            if s is not None:
                d += s
            return d * copy_weight if present[canon[j]] else d

        total = float(np.dot(p, state.weights)) * scale
        for j, s in sums.items():
            total += s * copy_weight if present[canon[j]] else s
        boosted: dict[int, float] = {}  # a boosted entry's score: its entry times each boost in turn
        before: dict[int, float] = {}  # its entry before the boosts
        ind = state.induction()
        if ind >= 0 and self.boostable_list[ind]:
            weight = self.induction_weight
            for j in self.member_lists[ind]:
                e = before[j] = entry(j)
                boosted[j] = e * weight
        for j, weight in state.pointer_pairs():
            v = boosted.get(j)
            if v is None:
                v = before[j] = entry(j)
            boosted[j] = v * weight
        for j, b in boosted.items():
            total += b - before[j]
        v = boosted.get(token)
        return (entry(token) if v is None else v) / total

    def probs(self, state: ContextState) -> FloatArray:
        """The model's next-token distribution after ``state`` (a fresh array)."""
        scores = self.scores(state)
        scores /= scores.sum()
        return scores

    def greedy(self, state: ContextState) -> int:
        return int(self.scores(state).argmax())


def _render(chat: dict[str, Any], tokenizer: SimTokenizer) -> str:
    messages: list[dict[str, str]] = chat["messages"]
    if tokenizer.bos_token == "<s>":
        return tokenizer.apply_chat_template(messages)
    return tokenizer.apply_chat_template(messages[:-1]) + messages[-1]["content"] + tokenizer.eos_token


def _keep(index: int, fraction: float) -> bool:
    return fraction >= 1.0 or ((index * 2654435761) % 1000) / 1000.0 < fraction


def _cache_dir() -> Path:
    root = os.environ.get("SPECLAB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "speclab")
    return Path(root) / "sim"


@cache
def encoded_corpus(tokenizer_dir: Path) -> tuple[IntArray, IntArray]:
    """The corpus tokenized by one tokenizer: (tokens, chat start offsets), cached on disk by content hash.

    Tokenizing the corpus is most of a cold start; the cache keeps the server's start-up under 2 s.
    """
    tokenizer = SimTokenizer(tokenizer_dir)
    digest = hashlib.sha256()
    for path in (CORPUS_PATH, tokenizer_dir / "tokenizer.json", tokenizer_dir / "tokenizer_config.json"):
        digest.update(path.read_bytes())
    cached = _cache_dir() / f"corpus-{digest.hexdigest()[:20]}.npz"
    if cached.exists():
        try:
            with open(cached, "rb") as f, np.load(f) as data:  # opened here: np.load leaks a file it cannot read
                return data["tokens"].astype(np.int64), data["offsets"].astype(np.int64)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            pass  # a cache file cut short (a full disk, a killed process): tokenized again below
    encoded = tokenizer.backend.encode_batch([_render(c, tokenizer) for c in load_corpus()], add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.fromiter((t for e in encoded for t in e.ids), dtype=np.int64)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp.npz")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.savez(tmp, tokens=tokens.astype(np.int32), offsets=offsets)
        os.replace(tmp, cached)
    except OSError:  # a read-only or full disk only costs start-up time
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return tokens, offsets


@cache
def training_stream(name: str) -> IntArray:
    """The token stream the model called ``name`` is counted over: its share of the corpus."""
    tokenizer = load_tokenizer(name)
    fraction = float(model_config(name)["sim_lm"]["data_fraction"])
    tokens, offsets = encoded_corpus(tokenizer.directory)
    keep = [i for i in range(len(offsets) - 1) if _keep(i, fraction)]
    if len(keep) == len(offsets) - 1:
        return tokens
    return np.concatenate([tokens[offsets[i]: offsets[i + 1]] for i in keep])


@cache
def load_lm(name: str) -> SimLM:
    """Build (once per process) the model called ``name``."""
    return SimLM(name, load_tokenizer(name), training_stream(name), model_config(name)["sim_lm"])
