"""What the app remembers between snapshots: interval history, events and A/B config windows.

Snapshots carry the cumulative stats and the last closed interval; the app keeps the rest. Each
closed interval is taken once (snapshots arrive at 4 Hz, intervals close at 1 Hz), which gives the
time series and, because counts add up exactly, per-config windows for the A/B view: when a
variant is relaunched its window so far becomes "previous" and a new one starts, each with the
baseline's numbers over the very same intervals (the same traffic). Windows keep these sums per
prompt class as well as for all classes, since a draft length can help one class and hurt another.
Percentiles do not add, so a window reports mean latency (exact, from count-weighted means) and its
worst 1 s p99.
No Textual here: the state is tested on its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from speclab.model.acceptance import acceptance_length, add_histogram, rejection_rate
from speclab.model.names import Metric
from speclab.model.records import Event
from speclab.model.snapshot import ALL_CLASSES, ClassStats, Snapshot, VariantStats
from speclab.session.api import ServerView, SessionInfo

RELAUNCH_KIND = "relaunch"
"""Event kind (with ``variant`` set and ``data["changes"]``) that starts a new config window."""

HISTORY_LIMIT = 3600
EVENT_LIMIT = 500


@dataclass(frozen=True, slots=True)
class IntervalPoint:
    """One closed 1 s interval of one variant, as the time series plots it."""

    interval: int
    t: float
    requests_per_s: float
    tokens_per_s: float
    rejection_rate: float | None
    e2e_p99_us: int | None
    e2e_corrected_p99_us: int | None
    errors: int


@dataclass(slots=True)
class Totals:
    """Additive sums of ``ClassStats`` over a run of intervals."""

    intervals: int = 0
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    window_s: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)
    structured_total: int = 0
    structured_failed: int = 0
    e2e_count: int = 0
    e2e_sum_us: float = 0.0
    e2e_corrected_sum_us: float = 0.0
    e2e_worst_p99_us: int | None = None
    e2e_corrected_worst_p99_us: int | None = None

    def add(self, stats: ClassStats) -> None:
        self.intervals += 1
        self.requests += stats.requests
        self.errors += stats.error_count
        self.output_tokens += stats.output_tokens
        self.window_s += stats.window_s
        acc = stats.acceptance
        self.steps += acc.steps
        self.drafted += acc.drafted
        self.accepted += acc.accepted
        add_histogram(self.histogram, acc.histogram)
        self.structured_total += stats.structured_total
        self.structured_failed += stats.structured_failed
        e2e = stats.latency.get(Metric.E2E.value)
        e2e_c = stats.latency.get(Metric.E2E_CORRECTED.value)
        if e2e is not None and e2e.count:
            self.e2e_count += e2e.count
            self.e2e_sum_us += e2e.mean * e2e.count
            self.e2e_worst_p99_us = _max_opt(self.e2e_worst_p99_us, e2e.p99)
        if e2e_c is not None and e2e_c.count:
            self.e2e_corrected_sum_us += e2e_c.mean * e2e_c.count
            self.e2e_corrected_worst_p99_us = _max_opt(self.e2e_corrected_worst_p99_us, e2e_c.p99)

    @property
    def acceptance_length(self) -> float | None:
        return acceptance_length(self.steps, self.accepted)

    @property
    def rejection_rate(self) -> float | None:
        return rejection_rate(self.accepted, self.drafted)

    @property
    def structured_failure_rate(self) -> float | None:
        return self.structured_failed / self.structured_total if self.structured_total else None

    @property
    def requests_per_s(self) -> float | None:
        return self.requests / self.window_s if self.window_s else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.window_s if self.window_s else None

    def e2e_mean_us(self, corrected: bool) -> float | None:
        if not self.e2e_count:
            return None
        total = self.e2e_corrected_sum_us if corrected else self.e2e_sum_us
        return total / self.e2e_count

    def e2e_worst_p99(self, corrected: bool) -> int | None:
        return self.e2e_corrected_worst_p99_us if corrected else self.e2e_worst_p99_us


@dataclass(slots=True)
class ConfigWindow:
    """One variant under one config, with the baseline over the same intervals, per prompt class.

    ``own_by_class`` and ``baseline_by_class`` are keyed by class name and ``ALL_CLASSES``.
    """

    variant: str
    config: dict[str, Any]
    start_t: float
    own_by_class: dict[str, Totals] = field(default_factory=dict)
    baseline_by_class: dict[str, Totals] = field(default_factory=dict)
    end_t: float | None = None
    cause: str = "start"

    @property
    def own(self) -> Totals:
        return self.own_by_class.get(ALL_CLASSES) or Totals()

    @property
    def baseline(self) -> Totals:
        return self.baseline_by_class.get(ALL_CLASSES) or Totals()

    def totals(self, prompt_class: str) -> tuple[Totals | None, Totals | None]:
        """(this variant, the baseline) for one class, or ``None`` where nothing was taken."""
        return self.own_by_class.get(prompt_class), self.baseline_by_class.get(prompt_class)

    def add(self, own: VariantStats, base: VariantStats | None) -> None:
        """Take one closed interval of every class (a class absent from it counts as idle)."""
        _add_classes(self.own_by_class, own)
        if base is not None:
            _add_classes(self.baseline_by_class, base)


def _add_classes(by_class: dict[str, Totals], stats: VariantStats) -> None:
    total = stats.total
    idle = ClassStats(window_s=total.window_s)
    before = by_class.get(ALL_CLASSES)
    # Read before the loop: "all" is updated inside it, in set order.
    taken = (before.intervals, before.window_s) if before is not None else (0, 0.0)
    for name in by_class.keys() | stats.classes.keys():
        if name not in by_class:  # first seen now: it was idle over the intervals taken so far
            by_class[name] = Totals(intervals=taken[0], window_s=taken[1])
        by_class[name].add(stats.classes.get(name, total if name == ALL_CLASSES else idle))


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
        self.history: dict[str, deque[IntervalPoint]] = {
            v: deque(maxlen=history_limit) for v in info.variants
        }
        self.events: deque[tuple[int, Event]] = deque(maxlen=EVENT_LIMIT)
        self.saturated: set[int] = set()
        self.windows: dict[str, ConfigWindow] = {}
        self.previous: dict[str, ConfigWindow] = {}
        self.configs: dict[str, dict[str, Any]] = {}
        self.windows_revision = 0  # bumped when windows/previous change: views redraw only then

    def set_servers(self, views: Mapping[str, ServerView]) -> None:
        """Learn the baseline and each variant's launched settings (before the first window opens)."""
        self.baseline = pick_baseline(self.info, views)
        for name, view in views.items():
            self.configs.setdefault(name, dict(view.settings))

    def ingest(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        self.snapshots_seen += 1
        self.saturated.update(snapshot.saturated_intervals)
        if snapshot.interval > self.last_interval and snapshot.last_interval:
            self.last_interval = snapshot.interval
            self._take_interval(snapshot)
        for event in snapshot.events:
            self.events.append((snapshot.interval, event))
            if event.kind == RELAUNCH_KIND and event.variant:
                self._relaunch(event)

    def _take_interval(self, snapshot: Snapshot) -> None:
        self.windows_revision += 1
        base = snapshot.last_interval.get(self.baseline)
        for variant, stats in snapshot.last_interval.items():
            total = stats.total
            e2e = total.latency.get(Metric.E2E.value)
            e2e_c = total.latency.get(Metric.E2E_CORRECTED.value)
            point = IntervalPoint(
                interval=snapshot.interval,
                t=snapshot.t,
                requests_per_s=total.requests_per_s,
                tokens_per_s=total.output_tokens_per_s,
                rejection_rate=total.acceptance.rejection_rate,
                e2e_p99_us=e2e.p99 if e2e else None,
                e2e_corrected_p99_us=e2e_c.p99 if e2e_c else None,
                errors=total.error_count,
            )
            self.history.setdefault(variant, deque(maxlen=HISTORY_LIMIT)).append(point)
            self.window(variant, snapshot.t).add(stats, base)

    def window(self, variant: str, t: float = 0.0) -> ConfigWindow:
        if variant not in self.windows:
            self.windows[variant] = ConfigWindow(variant, dict(self.configs.get(variant, {})), start_t=t)
        return self.windows[variant]

    def _relaunch(self, event: Event) -> None:
        variant = event.variant or ""
        changes = dict(event.data.get("changes") or {})
        self.windows_revision += 1
        current = self.window(variant, event.t)
        config = {**current.config, **changes}
        self.configs[variant] = config
        if current.own.intervals == 0:
            current.config = config
            current.cause = event.message or current.cause
            return
        current.end_t = event.t
        self.previous[variant] = current
        self.windows[variant] = ConfigWindow(variant, config, start_t=event.t, cause=event.message)


def config_label(config: Mapping[str, Any]) -> str:
    """Short, stable text for a variant's settings (``k=4 seqs=64 batched=8192 chunked=on``)."""
    short = {
        "num_speculative_tokens": "k",
        "k": "k",
        "max_num_seqs": "seqs",
        "max_num_batched_tokens": "batched",
        "enable_chunked_prefill": "chunked",
    }
    parts = []
    seen: set[str] = set()
    for key, value in config.items():
        label = short.get(key, key)
        if label in seen or value is None:  # None: left to the server's default
            continue
        seen.add(label)
        if isinstance(value, bool):
            value = "on" if value else "off"
        parts.append(f"{label}={value}")
    return " ".join(parts) if parts else "as launched"


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
