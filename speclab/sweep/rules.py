"""What draft lengths and per-batch schedules a sweep may run: ``speclab.model.speculative``'s
rules (the ones the lab file and the simulator use) with the sweep's field names on the error.

Those rules are vLLM 0.33's (``num_speculative_tokens`` > 0; MTP's divisibility by ``n_predict``;
FLy's minimum of 2 and its window; the schedule's shape from ``v1/spec_decode/dynamic/utils.py``)
plus suffix decoding's tree depth, which bounds what it can ever draft. vLLM clamps a scheduled k
above ``num_speculative_tokens`` and, on its V1 model runner, drops the schedule for methods whose
proposer cannot vary k, both with at most a log line; a sweep refuses both, because a cell that
silently ran something else would be measured under the wrong name.
"""

from __future__ import annotations

from dataclasses import dataclass

from speclab.model import speculative as sd
from speclab.model.errors import InputError
from speclab.model.limits import MAX_SPEC_TOKENS

MAX_K = MAX_SPEC_TOKENS  # the lab file's ceiling on num_speculative_tokens
DYNAMIC_K_METHODS = sd.DYNAMIC_K_METHODS

Entry = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class DraftRules:
    """The facts about a lab's drafter that bound its k (``method`` None: the lab has no draft)."""

    method: str | None
    rejection_sample_method: str = "standard"
    n_predict: int | None = None  # MTP modules a checkpoint ships (k above it must be a multiple)
    suffix_max_tree_depth: int = sd.SUFFIX_DEFAULT_TREE_DEPTH
    fly_window_size: int | None = None


def check_k(k: int, rules: DraftRules, field: str) -> None:
    """InputError naming ``field`` when ``rules``' method cannot run with ``k`` drafts (0 = baseline)."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise InputError(f"{field}: k must be a whole number of draft tokens, got {k!r}")
    if k < 0:
        raise InputError(f"{field}: k={k} is negative; k is the number of draft tokens per step (0 = the baseline)")
    if k == 0:
        return
    if rules.method is None:
        raise InputError(f"{field}: k={k} needs a draft, and the lab has no [draft] section; only k=0 can run")
    if k > MAX_K:
        raise InputError(f"{field}: k={k} is above the lab limit of {MAX_K} draft tokens")
    try:
        sd.check_draft_length(k, rules.method, n_predict=rules.n_predict,
                              suffix_max_tree_depth=rules.suffix_max_tree_depth,
                              rejection_sample_method=rules.rejection_sample_method,
                              fly_window_size=rules.fly_window_size)
    except ValueError as exc:
        raise InputError(f"{field}: k={k}: {exc}") from None


def normalize_schedule(raw: object, field: str) -> list[Entry]:
    """``num_speculative_tokens_per_batch_size`` validated and sorted as vLLM 0.33 does (in its words),
    errors naming ``field``; whole numbers only, as the sweep's parsers give them."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise InputError(f"{field}: a schedule is a non-empty list of [range_start, range_end, k] entries")
    for i, entry in enumerate(raw):
        if isinstance(entry, (list, tuple)) and any(isinstance(x, bool) or not isinstance(x, int) for x in entry):
            raise InputError(f"{field}[{i}]: {list(entry)!r} must hold whole numbers")
        try:
            sd.schedule_entry(entry)
        except ValueError as exc:
            raise InputError(f"{field}[{i}]: {exc}") from None
    try:
        return sd.normalize_schedule(raw)
    except ValueError as exc:
        raise InputError(f"{field}: {exc}") from None


def check_schedule(raw: object, rules: DraftRules, field: str) -> list[Entry]:
    """A per-batch schedule arm: vLLM's shape, a method that honours it, and k's the method takes."""
    entries = normalize_schedule(raw, field)
    top = max(k for _, _, k in entries)
    if top == 0:
        raise InputError(f"{field}: every k in the schedule is 0; that arm is the baseline (k=0), already in the grid")
    if rules.method is not None and rules.method not in sd.DYNAMIC_K_METHODS:
        raise InputError(f"{field}: vLLM 0.33 ignores num_speculative_tokens_per_batch_size for method "
                         f"{rules.method!r} (its V1 runner falls back to a fixed k); schedules work with "
                         f"{', '.join(sorted(sd.DYNAMIC_K_METHODS))}")
    check_k(top, rules, field)  # the arm's num_speculative_tokens: the largest k it schedules
    return entries
