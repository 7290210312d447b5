"""What the app remembers between snapshots: interval history for the time series, and events.

Snapshots are complete (docs/measurements.md): each carries every interval closed since the previous one and
every event, and the cumulative stats and A/B windows come merged by the aggregator. So this keeps
view state only — the points it plots and the events it lists, no counters of its own — and loses
nothing at any replay speed; a ``rebuilt`` snapshot (a replay seeking backwards) starts it over.
No Textual here: the state is tested on its own.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speclab.model.epochs import RELAUNCH_EVENT, TRANSITION_EVENT, settings_text
from speclab.model.names import INTERVAL_S, Metric
from speclab.model.records import Event
from speclab.model.snapshot import IntervalStats, Snapshot
from speclab.session.api import ServerView, SessionInfo

RELAUNCH_KIND = RELAUNCH_EVENT
"""Event kind that starts a new config epoch (``data["epoch"]``, ``data["settings"]``)."""
TRANSITION_KIND = TRANSITION_EVENT

HISTORY_LIMIT = 3600
EVENT_LIMIT = 500


@dataclass(frozen=True, slots=True)
class IntervalPoint:
    """One closed 1 s interval of one variant, as the time series plots it."""

    interval: int
    t: float
    epoch: int
    requests_per_s: float
    tokens_per_s: float
    rejection_rate: float | None
    e2e_p99_us: int | None
    e2e_corrected_p99_us: int | None
    errors: int


def pick_baseline(info: SessionInfo, views: Mapping[str, ServerView]) -> str:
    """The server marked baseline; else a variant named "baseline"; else the first one."""
    for name, view in views.items():
        if view.baseline:
            return name
    if "baseline" in info.variants:
        return "baseline"
    return info.variants[0] if info.variants else ""


class LabState:
    """Everything the screens render, fed one snapshot at a time by the app's worker."""

    def __init__(self, info: SessionInfo, *, history_limit: int = HISTORY_LIMIT) -> None:
        self.info = info
        self.baseline = pick_baseline(info, {})
        self.latest: Snapshot | None = None
        self.snapshots_seen = 0
        self.last_interval = -1
        self._history_limit = history_limit
        self.history: dict[str, deque[IntervalPoint]] = {
            v: deque(maxlen=history_limit) for v in info.variants
        }
        self.events: deque[tuple[int, Event]] = deque(maxlen=EVENT_LIMIT)
        self.saturated: set[int] = set()
        self.intervals_taken = 0  # bumped per closed interval: views that change only then redraw only then

    def set_servers(self, views: Mapping[str, ServerView]) -> None:
        """Learn the baseline from the servers (the one marked so)."""
        self.baseline = pick_baseline(self.info, views)

    def ingest(self, snapshot: Snapshot) -> None:
        if snapshot.rebuilt:
            self._forget()
        self.latest = snapshot
        self.snapshots_seen += 1
        for interval in snapshot.intervals:
            if interval.index > self.last_interval:
                self.last_interval = interval.index
                self._take_interval(interval)
        horizon = self.last_interval - self._history_limit  # older ones are off every plot
        self.saturated.update(i for i in snapshot.saturated_intervals if i > horizon)
        if len(self.saturated) > self._history_limit:
            self.saturated = {i for i in self.saturated if i > horizon}
        for event in snapshot.events:
            self.events.append((max(0, math.floor(event.t / INTERVAL_S)), event))

    def _forget(self) -> None:
        self.last_interval = -1
        for points in self.history.values():
            points.clear()
        self.events.clear()
        self.saturated.clear()
        self.intervals_taken += 1

    def _take_interval(self, interval: IntervalStats) -> None:
        self.intervals_taken += 1
        for variant, stats in interval.variants.items():
            total = stats.total
            e2e = total.latency.get(Metric.E2E.value)
            e2e_c = total.latency.get(Metric.E2E_CORRECTED.value)
            point = IntervalPoint(
                interval=interval.index,
                t=interval.end_s,
                epoch=stats.epoch,
                requests_per_s=total.requests_per_s,
                tokens_per_s=total.output_tokens_per_s,
                rejection_rate=total.acceptance.rejection_rate,
                e2e_p99_us=e2e.p99 if e2e else None,
                e2e_corrected_p99_us=e2e_c.p99 if e2e_c else None,
                errors=total.error_count,
            )
            self.history.setdefault(variant, deque(maxlen=self._history_limit)).append(point)


def config_label(config: Mapping[str, Any]) -> str:
    """Short, stable text for a variant's settings (``k=4 seqs=64 batched=8192 chunked=on``)."""
    return settings_text(config) or "as launched"
