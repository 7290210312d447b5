"""Draft heads (EAGLE, EAGLE-3, MTP) modelled as heads on the target, not as separate models.

A real head is one decoder layer trained (teacher-forced) on the target's own data that reads the
target's hidden state and drafts from it. Its simulator counterpart is the same: a short-context
n-gram counted over the target's training stream (where the target's teacher-forced predictions
are its data) that reads the target's own ``ContextState`` for the copy features (the context-word
boost, induction, pointer), which is what the hidden state carries. So a head shares no state of
its own and agrees with the target more than a separate small draft trained on less data does.

The variants differ in structure, not in stated acceptance: EAGLE sees the target's features for
its first draft only and its own afterwards; EAGLE-3 fuses three layers and is trained with
training-time test, so it keeps them at every depth with a longer context; an MTP module is a full
layer trained with the target but there is one of it (``n_predict`` = 1), so drafts past the first
rerun it on its own output. Acceptance per class emerges from how well each predicts the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from .lm import ContextState, SimLM, load_lm, training_stream
from .ngram import FloatArray, NgramCounts


@dataclass(frozen=True, slots=True)
class HeadSpec:
    order: int  # n-gram order (context tokens + 1) of what the head learned
    smoothing: float
    feature_depth: int | None  # drafts (from the first) that see the target's copy features; None: every one
    description: str


HEAD_SPECS: Final[dict[str, HeadSpec]] = {
    "eagle": HeadSpec(3, 2.0, 1, "an EAGLE head: the target's features for its first draft, its own after"),
    "eagle3": HeadSpec(4, 1.5, None, "an EAGLE-3 head: the target's fused features at every depth"),
    "mtp": HeadSpec(4, 1.0, 1, "one MTP module: the target's features for its first draft, rerun on its own after"),
}


class DraftHead:
    """One head on ``target``: drafts from the target's own state."""

    def __init__(self, method: str, target: SimLM, counts: NgramCounts, spec: HeadSpec) -> None:
        self.method, self.target, self.counts, self.spec = method, target, counts, spec

    def scores(self, state: ContextState, depth: int) -> FloatArray:
        """Unnormalised scores for the draft at ``depth`` (0 = the first) after the target's ``state``."""
        scores = self.counts.dist(state.tokens).copy()
        if self.spec.feature_depth is None or depth < self.spec.feature_depth:
            self.target.copy_features(state, scores)
        return scores


@cache
def load_head(method: str, target_name: str) -> DraftHead:
    """The ``method`` head of the target called ``target_name`` (built once per process)."""
    spec = HEAD_SPECS[method]
    target = load_lm(target_name)
    counts = NgramCounts(training_stream(target_name), target.vocab_size, spec.order, spec.smoothing)
    return DraftHead(method, target, counts, spec)
