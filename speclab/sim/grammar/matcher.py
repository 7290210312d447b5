"""One request's grammar state: token masks, accepted tokens, speculated runs, rollback.

The semantics are those of vLLM 0.33's ``GuidanceGrammar`` and of the structured-output manager
around it (``vllm/v1/structured_output/__init__.py``): once the value is complete the matcher is
*stopped* and its mask allows only EOS, so the answer ends there (no trailing whitespace); an
accepted EOS *terminates* it, after which the mask allows everything (which only matters with
``ignore_eos``); a run of draft tokens is cut to the longest prefix the grammar accepts, and
nothing at all once the matcher is stopped; the verify step gets one mask per draft position plus
the bonus position, computed by advancing through the drafts and rolling back.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import llguidance
import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
BitmaskArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float64]


def unpack_bitmask(bitmask: BitmaskArray, vocab_size: int) -> BoolArray:
    """llguidance's bitmask (32 tokens per int32, token t at bit t % 32 of word t // 32) as booleans."""
    words = bitmask if sys.byteorder == "little" else bitmask.byteswap()
    return np.unpackbits(words.view(np.uint8), axis=-1, count=vocab_size, bitorder="little").view(np.bool_)


def apply_mask(scores: FloatArray, mask: BoolArray) -> FloatArray:
    """Zero, in place, the scores of tokens the grammar forbids; returns ``scores``.

    Apply it to the model's raw scores, before temperature, top-k and top-p, as vLLM applies the
    bitmask to the logits before its sampler. Should every allowed token have a zero score (the
    simulator's models give every token some mass, so this is a guard), the allowed tokens get
    equal scores rather than leaving nothing to sample.
    """
    np.multiply(scores, mask, out=scores)
    if not scores.any():
        scores[mask] = 1.0
    return scores


class GrammarMatcher:
    """A request's position in its grammar (made by ``GrammarCompiler.compile``)."""

    __slots__ = ("_consumed", "_eos_at", "_m", "_words", "eos_token_id", "vocab_size")

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, eos_token_id: int) -> None:
        self._m = matcher
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self._words = (vocab_size + 31) // 32
        self._consumed: list[bool] = []  # per accepted token: whether llguidance consumed it
        self._eos_at = -1  # index in _consumed of the accepted EOS that terminated the grammar

    # --- state -------------------------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        """Tokens accepted so far (net of rollbacks)."""
        return len(self._consumed)

    @property
    def error(self) -> str:
        """llguidance's error once it refused a token or a limit was hit ("" otherwise); it never clears."""
        return self._m.get_error()

    def is_accepting(self) -> bool:
        """The text so far is a complete value: EOS is allowed now."""
        return bool(self._m.is_accepting())

    def is_stopped(self) -> bool:
        """Nothing but EOS can follow (the value is complete, or the matcher is in error)."""
        return bool(self._m.is_stopped())

    def is_terminated(self) -> bool:
        """An EOS has been accepted: the request finishes with finish_reason "stop" unless it ignores EOS."""
        return self._eos_at >= 0

    # --- masks -------------------------------------------------------------------------------
    def fill_bitmask(self, out: BitmaskArray) -> None:
        """Write the next position's bitmask into ``out`` (contiguous int32, ceil(vocab/32) words)."""
        if out.dtype != np.int32 or out.shape[-1] != self._words or not out.flags.c_contiguous:
            raise ValueError(f"bitmask row must be a contiguous int32 array of {self._words} words")
        if self.is_terminated():
            out.fill(-1)
        else:
            self._m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)

    def bitmask(self) -> BitmaskArray:
        out = np.empty(self._words, np.int32)
        self.fill_bitmask(out)
        return out

    def mask(self) -> BoolArray:
        """Which tokens may come next, as a boolean array over the vocabulary."""
        return unpack_bitmask(self.bitmask(), self.vocab_size)

    # --- advancing ---------------------------------------------------------------------------
    def accept(self, tokens: Sequence[int]) -> bool:
        """Advance by tokens the engine committed; False if the grammar refused one (then it stays in error).

        As in vLLM: an EOS terminates the grammar, and once the matcher is stopped further tokens are
        accepted without being checked.
        """
        for token in tokens:
            if token == self.eos_token_id and self._eos_at < 0:
                self._eos_at = len(self._consumed)
            if self._m.is_stopped():
                self._consumed.append(False)
                continue
            if not self._m.consume_token(token):
                if self._eos_at == len(self._consumed):
                    self._eos_at = -1
                return False
            self._consumed.append(True)
        return True

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (EOS and unchecked ones included)."""
        if not 0 <= num_tokens <= len(self._consumed):
            raise ValueError(f"cannot roll back {num_tokens} of {len(self._consumed)} accepted tokens")
        if num_tokens == 0:
            return
        undone = self._consumed[-num_tokens:]
        del self._consumed[-num_tokens:]
        if self._eos_at >= len(self._consumed):
            self._eos_at = -1
        if consumed := sum(undone):
            self._m.rollback(consumed)

    # --- speculation -------------------------------------------------------------------------
    def validate(self, drafts: Sequence[int]) -> int:
        """How many leading draft tokens the grammar accepts (vLLM keeps those and drops the rest).

        Stops at the first negative id (vLLM's padding of rejected positions); 0 once stopped.
        """
        run = list(drafts)
        for i, token in enumerate(run):
            if token < 0:
                run = run[:i]
                break
        if not run or self._m.is_stopped():
            return 0
        return int(self._m.validate_tokens(run))

    def verification_bitmasks(self, drafts: Sequence[int]) -> BitmaskArray:
        """One bitmask row per draft position and one for the bonus token (len(drafts) + 1 rows).

        vLLM's ``grammar_bitmask``: row i is the mask after drafts[:i]; a draft the grammar refuses
        (drafts should have been cut by ``validate``) freezes the rows after it at its own mask,
        and is checked before it is consumed so the matcher is not left in error. The matcher
        ends where it started.
        """
        rows = np.empty((len(drafts) + 1, self._words), np.int32)
        advanced, failed = 0, -1
        for i, token in enumerate(drafts):
            if failed >= 0:
                rows[i] = rows[failed]
                continue
            self.fill_bitmask(rows[i])
            if not self.is_terminated() and (self._m.is_stopped() or self._m.validate_tokens([token]) == 1):
                self.accept([token])
                advanced += 1
            else:
                failed = i
        if failed >= 0:
            rows[-1] = rows[failed]
        else:
            self.fill_bitmask(rows[-1])
        self.rollback(advanced)
        return rows

    def verification_masks(self, drafts: Sequence[int]) -> BoolArray:
        """``verification_bitmasks`` as booleans: shape (len(drafts) + 1, vocab_size)."""
        return unpack_bitmask(self.verification_bitmasks(drafts), self.vocab_size)
