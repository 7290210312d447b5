"""Config epochs (docs/measurements.md, "Config epochs"): which configuration a number belongs to.

A variant's first configuration is epoch 1; each relaunch starts the next one. The time from the
relaunch request until the new server has answered a request is a transition, reported on its own
and part of neither epoch. These are the event kinds that mark the boundaries (written to
``events.jsonl``, so a replay draws the same boundaries), the labels users read, and the frozen
facts snapshots and reports carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRANSITION_EVENT = "transition"
"""A relaunch was requested (``t`` = the request): ``data`` has ``from_epoch`` and ``to_epoch``."""
RELAUNCH_EVENT = "relaunch"
"""The new server answered its first request (``t``): ``data`` has ``epoch``, ``settings``, ``changes``."""
RELAUNCH_FAILED_EVENT = "relaunch_failed"
"""The new server never became ready: the transition stays open; ``data`` has ``from_epoch``."""

# Short names of the settings a relaunch can change, in the order labels list them.
SHORT_NAMES: dict[str, str] = {
    "num_speculative_tokens": "k",
    "k": "k",
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "batched",
    "enable_chunked_prefill": "chunked",
}
LABEL_KEYS = ("num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")


def setting_text(key: str, value: Any) -> str:
    """``k=6``, ``chunked=off``: one setting as labels and titles show it."""
    if isinstance(value, bool):
        value = "on" if value else "off"
    return f"{SHORT_NAMES.get(key, key)}={value}"


def settings_text(settings: Mapping[str, Any], keys: tuple[str, ...] | None = None) -> str:
    """Short, stable text for settings (``k=4 seqs=64 batched=8192 chunked=on``); None values are
    left to the server's default and not shown."""
    parts: list[str] = []
    seen: set[str] = set()
    for key, value in settings.items():
        if keys is not None and key not in keys:
            continue
        short = SHORT_NAMES.get(key, key)
        if short in seen or value is None or isinstance(value, (dict, list)):
            continue
        seen.add(short)
        parts.append(setting_text(key, value))
    return " ".join(parts)


def changed_settings(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The relaunch settings whose value in ``after`` differs from ``before``, in label order."""
    return {k: after.get(k) for k in LABEL_KEYS if k in after and after.get(k) != before.get(k)}


def epoch_label(variant: str, epoch: int, first: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """``k4`` for the configuration a variant was launched with; ``k4·2 (k=6)`` for its second one,
    naming what differs from the first (so the label alone says which configuration it is)."""
    if epoch <= 1:
        return variant
    text = settings_text(changed_settings(first, settings))
    return f"{variant}·{epoch}" + (f" ({text})" if text else "")


@dataclass(frozen=True, slots=True)
class EpochInfo:
    """One configuration of one variant: from ``start_s`` (run clock) to ``end_s`` (None while current)."""

    variant: str
    epoch: int
    label: str
    settings: dict[str, Any] = field(default_factory=dict)
    start_s: float = 0.0
    end_s: float | None = None

    def covers(self, start_s: float, end_s: float, slack: float = 1e-6) -> bool:
        """Does [start_s, end_s] lie inside this epoch?"""
        return start_s >= self.start_s - slack and (self.end_s is None or end_s <= self.end_s + slack)


@dataclass(frozen=True, slots=True)
class TransitionInfo:
    """A relaunch from its request until the new server answered (``end_s`` None: it never did)."""

    variant: str
    from_epoch: int
    to_epoch: int
    start_s: float
    end_s: float | None = None
    requests: int = 0  # non-warm-up requests that fell in the transition, whatever their outcome
    errors: dict[str, int] = field(default_factory=dict)  # error kind -> count among them

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def as_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "from_epoch": self.from_epoch, "to_epoch": self.to_epoch,
                "start_s": round(self.start_s, 3), "end_s": None if self.end_s is None else round(self.end_s, 3),
                "requests": self.requests, "errors": self.error_count, "error_kinds": dict(self.errors)}
