"""What draft lengths and per-batch schedules a draft method takes, by vLLM 0.33's own rules.

Mirrors ``vllm/config/speculative.py`` (``num_speculative_tokens`` > 0; MTP's divisibility by
``n_predict``; FLy's minimum of 2 and its window; suffix decoding's tree depth, which bounds what
it can ever draft) and ``vllm/v1/spec_decode/dynamic/utils.py`` (the schedule's shape: inclusive,
positive, sorted, non-overlapping ranges from batch size 1, k >= 0). vLLM clamps a scheduled k
above ``num_speculative_tokens`` and, on its V1 model runner, drops the schedule for methods whose
proposer cannot vary k, both with at most a log line; a sweep refuses both, because a cell that
silently ran something else would be measured under the wrong name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from speclab.model.errors import InputError

MAX_K = 64  # the lab file's ceiling on num_speculative_tokens
# vLLM 0.33 V1 runner (config/vllm.py): the methods whose proposer honours a per-batch-size k.
DYNAMIC_K_METHODS: frozenset[str] = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})

Entry = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class DraftRules:
    """The facts about a lab's drafter that bound its k (``method`` None: the lab has no draft)."""

    method: str | None
    rejection_sample_method: str = "standard"
    n_predict: int | None = None  # MTP modules a checkpoint ships (k above it must be a multiple)
    suffix_max_tree_depth: int = 24
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
    if rules.method == "mtp" and rules.n_predict and k > rules.n_predict and k % rules.n_predict:
        raise InputError(f"{field}: vLLM 0.33 refuses k={k} for mtp: num_speculative_tokens:{k} must be "
                         f"divisible by n_predict={rules.n_predict}")
    if rules.method == "suffix" and k > rules.suffix_max_tree_depth:
        raise InputError(f"{field}: k={k} is deeper than suffix decoding can draft "
                         f"(suffix_decoding_max_tree_depth={rules.suffix_max_tree_depth} bounds match plus drafts)")
    if rules.rejection_sample_method == "fly":
        if k < 2:
            raise InputError(f"{field}: vLLM 0.33 refuses k={k} with rejection_sample_method 'fly': "
                             "FLy requires num_speculative_tokens to be at least 2.")
        if rules.fly_window_size is not None and rules.fly_window_size >= k:
            raise InputError(f"{field}: vLLM 0.33 refuses k={k} with fly_window_size={rules.fly_window_size}: "
                             "FLy requires fly_window_size to be smaller than num_speculative_tokens.")


def normalize_schedule(raw: object, field: str) -> list[Entry]:
    """``num_speculative_tokens_per_batch_size`` validated and sorted as vLLM 0.33 does, errors naming ``field``."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise InputError(f"{field}: a schedule is a non-empty list of [range_start, range_end, k] entries")
    parsed: list[Entry] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise InputError(f"{field}[{i}]: each entry is [range_start, range_end, k], got {entry!r}")
        if any(isinstance(x, bool) or not isinstance(x, int) for x in entry):
            raise InputError(f"{field}[{i}]: {list(entry)!r} must hold whole numbers")
        start, end, k = (int(x) for x in entry)
        if start <= 0 or end <= 0:
            raise InputError(f"{field}[{i}]: batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise InputError(f"{field}[{i}]: batch-size range start must be <= end for ({start}, {end}, {k})")
        if k < 0:
            raise InputError(f"{field}[{i}]: k={k} must be >= 0")
        parsed.append((start, end, k))
    parsed.sort(key=lambda e: e[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise InputError(f"{field}: batch-size ranges must not overlap ({start} is inside an earlier range)")
        previous_end = end
    if parsed[0][0] != 1:
        raise InputError(f"{field}: the first batch-size range must start at 1 so every batch size has a k")
    return parsed


def check_schedule(raw: object, rules: DraftRules, field: str) -> list[Entry]:
    """A per-batch schedule arm: vLLM's shape, a method that honours it, and k's the method takes."""
    entries = normalize_schedule(raw, field)
    top = max(k for _, _, k in entries)
    if top == 0:
        raise InputError(f"{field}: every k in the schedule is 0; that arm is the baseline (k=0), already in the grid")
    if rules.method is not None and rules.method not in DYNAMIC_K_METHODS:
        raise InputError(f"{field}: vLLM 0.33 ignores num_speculative_tokens_per_batch_size for method "
                         f"{rules.method!r} (its V1 runner falls back to a fixed k); schedules work with "
                         f"{', '.join(sorted(DYNAMIC_K_METHODS))}")
    check_k(top, rules, field)  # the arm's num_speculative_tokens: the largest k it schedules
    return entries


def dense_lookup(entries: Sequence[Entry], max_batch_size: int, num_speculative_tokens: int) -> list[int]:
    """vLLM's batch size -> k table (index 0 unused): gaps and the tail carry the previous k forward,
    every k clamped to ``num_speculative_tokens``. Used to say what a schedule does at a batch size."""
    dense = [0] * (max_batch_size + 1)
    nxt, last = 1, 0
    for start, end, k in sorted(entries):
        for b in range(nxt, min(start, max_batch_size + 1)):
            dense[b] = min(num_speculative_tokens, last)
        for b in range(max(start, nxt), min(end, max_batch_size) + 1):
            dense[b] = min(num_speculative_tokens, k)
        nxt, last = max(nxt, end + 1), k
        if nxt > max_batch_size:
            break
    for b in range(nxt, max_batch_size + 1):
        dense[b] = min(num_speculative_tokens, last)
    return dense
