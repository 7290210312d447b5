"""Automatic rollback triggers: a canary metric beyond a threshold for N intervals in a row.

``rejection>40`` (percent of drafted tokens rejected), ``structured>5`` (percent of structured
requests whose output failed its schema) and ``p99>1500ms`` (corrected e2e p99; ``ms`` or ``s``,
a bare number is milliseconds), judged per 1 s interval over the canary tenant's requests that a
speculative backend answered, each request in the interval in which it finished. An interval
with too little data for a metric (fewer than ``min_drafted`` drafted tokens for rejection, no
structured request, no finished request for p99) is not judged: it neither extends nor breaks
a streak, since a quiet second says nothing either way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from speclab.metrics.cells import finish_time
from speclab.metrics.groups import group_stats
from speclab.model.errors import InputError
from speclab.model.names import Metric
from speclab.model.records import RequestRecord

TriggerMetric = Literal["rejection", "structured", "p99"]
METRICS: tuple[TriggerMetric, ...] = ("rejection", "structured", "p99")
UNITS = {"rejection": "%", "structured": "%", "p99": " ms"}
_SPEC = re.compile(r"^\s*([a-z0-9_]+)\s*>\s*([0-9]*\.?[0-9]+)\s*(%|ms|s)?\s*$")


@dataclass(frozen=True)
class Trigger:
    metric: TriggerMetric
    threshold: float  # percent for the rates, milliseconds for p99

    @property
    def spec(self) -> str:
        return f"{self.metric}>{self.threshold:g}{UNITS[self.metric].strip()}"


def parse_trigger(text: str) -> Trigger:
    match = _SPEC.match(text)
    if not match:
        raise InputError(f"--trigger {text!r}: expected METRIC>THRESHOLD, e.g. rejection>40, structured>5, p99>1500ms")
    name, value, unit = match.group(1), float(match.group(2)), match.group(3)
    if name not in METRICS:
        raise InputError(f"--trigger {text!r}: no metric {name!r} (choose from {', '.join(METRICS)})")
    metric: TriggerMetric = "rejection" if name == "rejection" else "structured" if name == "structured" else "p99"
    if metric == "p99":
        if unit == "%":
            raise InputError(f"--trigger {text!r}: p99 is a time (ms or s), not a percentage")
        value = value * 1000.0 if unit == "s" else value
        if not value > 0:
            raise InputError(f"--trigger {text!r}: a p99 threshold must be above 0")
    else:
        if unit in ("ms", "s"):
            raise InputError(f"--trigger {text!r}: {metric} is a percentage, not a time")
        if not 0 <= value < 100:
            raise InputError(f"--trigger {text!r}: a {metric} threshold is a percentage from 0 to below 100")
    return Trigger(metric, value)


def interval_value(metric: TriggerMetric, records: Sequence[RequestRecord], min_drafted: int) -> float | None:
    """The metric over one interval's records, or None when the interval cannot be judged on it."""
    stats = group_stats(records)
    if metric == "rejection":
        rate = stats.acceptance.rejection_rate
        return None if rate is None or stats.acceptance.drafted < min_drafted else 100.0 * rate
    if metric == "structured":
        rate = stats.structured_failure_rate
        return None if rate is None else 100.0 * rate
    e2e = stats.latency.get(Metric.E2E_CORRECTED.value)
    return None if e2e is None or e2e.p99 is None else e2e.p99 / 1000.0


@dataclass(frozen=True)
class Fired:
    trigger: Trigger
    intervals: tuple[tuple[int, float], ...]  # (interval, value) of the streak that fired it

    @property
    def message(self) -> str:
        values = ", ".join(f"{v:.1f}{UNITS[self.trigger.metric]}" for _, v in self.intervals)
        first, last = self.intervals[0][0], self.intervals[-1][0]
        return (f"trigger {self.trigger.spec} held for {len(self.intervals)} intervals "
                f"({first}-{last}: {values})")


@dataclass
class TriggerWatch:
    """Feed it records as they arrive; ``judge(now)`` looks at every interval closed by then."""

    triggers: Sequence[Trigger]
    intervals: int = 3
    interval_s: float = 1.0
    min_drafted: int = 20
    close_delay_s: float = 0.5  # records from worker processes arrive a little after they finish
    since_s: float = 0.0  # intervals that began before this are not judged (the switch)
    _by_interval: dict[int, list[RequestRecord]] = field(default_factory=dict)
    _streaks: dict[Trigger, list[tuple[int, float]]] = field(default_factory=dict)
    _next: int | None = None
    judged: list[dict[str, object]] = field(default_factory=list)  # per judged interval, for the report

    def __post_init__(self) -> None:
        if self.intervals < 1:
            raise InputError(f"--trigger-intervals: expected at least 1, got {self.intervals}")

    def add(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            index = math.floor(finish_time(record) / self.interval_s)
            self._by_interval.setdefault(index, []).append(record)

    def judge(self, now: float) -> Fired | None:
        """Judge each newly closed interval in order; the first trigger to complete a streak fires."""
        first = math.ceil(self.since_s / self.interval_s - 1e-9)
        index = first if self._next is None else self._next
        while (index + 1) * self.interval_s + self.close_delay_s <= now:
            records = self._by_interval.pop(index, [])
            row: dict[str, object] = {"interval": index}
            for trigger in self.triggers:
                value = interval_value(trigger.metric, records, self.min_drafted)
                row[trigger.spec] = None if value is None else round(value, 3)
                if value is None:
                    continue
                streak = self._streaks.setdefault(trigger, [])
                if value > trigger.threshold:
                    streak.append((index, value))
                else:
                    streak.clear()
            self.judged.append(row)
            index += 1
            self._next = index
            for trigger in self.triggers:
                streak = self._streaks.get(trigger, [])
                if len(streak) >= self.intervals:
                    return Fired(trigger, tuple(streak[-self.intervals:]))
        self._next = index
        return None
