"""The relaunch dialog's speculative knobs beyond k: a k schedule by batch size, drafting and rejection.

A schedule is typed as ``START-END:K`` ranges (``1-16:4, 17-64:2, 65-1024:0``) and checked with
vLLM 0.33's rules before the dialog closes, so a bad one is explained in the dialog rather than by
a failed restart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from speclab.model import speculative as sd

SCHEDULE_KEY: Final = "num_speculative_tokens_per_batch_size"
DRAFT_SAMPLING_KEY: Final = "draft_sample_method"
REJECTION_KEY: Final = "rejection_sample_method"
SYNTHETIC_LENGTH_KEY: Final = "synthetic_acceptance_length"
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*:\s*(\d+)\s*$")


def format_schedule(schedule: Sequence[Sequence[int]] | None) -> str:
    return ", ".join(f"{a}-{b}:{k}" for a, b, k in schedule) if schedule else ""


def parse_schedule(text: str, k: int | None) -> list[tuple[int, int, int]] | None:
    """The typed schedule (None when empty); ValueError with the reason, in vLLM's words where its."""
    if not text.strip():
        return None
    entries: list[tuple[int, int, int]] = []
    for part in text.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"write ranges as START-END:K, e.g. 1-16:4, 17-64:2 (got {part.strip()!r})")
        start, end, value = (int(g) for g in match.groups())
        entries.append((start, end, value))
    schedule = sd.normalize_schedule(entries)
    over = sd.schedule_over_k(schedule, k) if k is not None else []
    if over:
        raise ValueError(f"{over[0][0]}-{over[0][1]}:{over[0][2]} is over k ({k}); vLLM 0.33 would clamp it")
    return schedule


def spec_before(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The launched knobs, with vLLM's defaults written out."""
    schedule = settings.get(SCHEDULE_KEY)
    return {
        SCHEDULE_KEY: [tuple(e) for e in schedule] if schedule else None,
        DRAFT_SAMPLING_KEY: settings.get(DRAFT_SAMPLING_KEY) or "greedy",
        REJECTION_KEY: settings.get(REJECTION_KEY) or "standard",
        SYNTHETIC_LENGTH_KEY: settings.get(SYNTHETIC_LENGTH_KEY),
    }


def spec_changes(before: Mapping[str, Any], schedule: list[tuple[int, int, int]] | None, sampling: str,
                 rejection: str, length_text: str, k: int | None) -> dict[str, Any]:
    """What changed among the knobs; ValueError (naming the field) when the new settings cannot run."""
    out: dict[str, Any] = {}
    if schedule != before.get(SCHEDULE_KEY):
        out[SCHEDULE_KEY] = [list(e) for e in schedule] if schedule else None
    if sampling != before.get(DRAFT_SAMPLING_KEY):
        out[DRAFT_SAMPLING_KEY] = sampling
    length: float | None = None
    if length_text.strip():
        try:
            length = float(length_text)
        except ValueError:
            raise ValueError("synthetic acceptance length: enter a number") from None
    if rejection == "synthetic":
        if length is None and before.get(SYNTHETIC_LENGTH_KEY) is None:
            raise ValueError("synthetic acceptance length: 'synthetic' needs a target acceptance length")
        if k is not None and length is not None and not 1.0 <= length <= k + 1:
            raise ValueError(f"synthetic acceptance length: must be in [1, {k + 1}] for k={k}")
    elif length is not None:
        raise ValueError("synthetic acceptance length: only rejection method 'synthetic' uses it")
    if rejection == "fly" and k is not None and k < 2:
        raise ValueError("rejection method: FLy requires num_speculative_tokens to be at least 2.")
    if rejection != before.get(REJECTION_KEY):
        out[REJECTION_KEY] = rejection
        if before.get(SYNTHETIC_LENGTH_KEY) is not None and rejection != "synthetic":
            out[SYNTHETIC_LENGTH_KEY] = None
    if rejection == "synthetic" and length is not None and length != before.get(SYNTHETIC_LENGTH_KEY):
        out[SYNTHETIC_LENGTH_KEY] = length
    return out
