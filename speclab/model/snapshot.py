"""Immutable snapshots: what the aggregator emits a few times a second and every front end consumes.

The UI, the headless printer and the recorder all read the same ``Snapshot`` stream; replay
produces it from a recording. Latencies are microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import acceptance
from .names import PERCENTILE_POINTS
from .records import Event, ServerSample


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Values at ``PERCENTILE_POINTS`` (µs), computed in one pass over a histogram's counts."""

    count: int = 0
    mean: float = 0.0
    values: tuple[int, ...] = ()  # aligned with PERCENTILE_POINTS; empty when count == 0

    def at(self, percentile: float) -> int | None:
        if not self.values:
            return None
        return self.values[PERCENTILE_POINTS.index(percentile)]

    @property
    def p50(self) -> int | None:
        return self.at(50.0)

    @property
    def p90(self) -> int | None:
        return self.at(90.0)

    @property
    def p99(self) -> int | None:
        return self.at(99.0)

    @property
    def p999(self) -> int | None:
        return self.at(99.9)

    @property
    def max(self) -> int | None:
        return self.at(100.0)


@dataclass(frozen=True, slots=True)
class AcceptanceStats:
    """Ratios of sums over requests (CONVENTIONS.md, Measurement rules)."""

    requests: int = 0  # requests that contributed counts
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: tuple[int, ...] = ()  # summed per-request acceptance_histogram
    source: str = "none"  # CountSource: exact, estimated, or a mix reported as "estimated"

    @property
    def acceptance_length(self) -> float | None:
        return acceptance.acceptance_length(self.steps, self.accepted)

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance.acceptance_rate(self.accepted, self.drafted)

    @property
    def rejection_rate(self) -> float | None:
        return acceptance.rejection_rate(self.accepted, self.drafted)

    @property
    def verifications_per_request(self) -> float | None:
        return self.steps / self.requests if self.requests else None

    @property
    def per_position(self) -> tuple[float, ...]:
        """P(draft position i accepted) = steps accepting > i drafts / steps (prefix acceptance)."""
        if not self.steps or not self.histogram:
            return ()
        return tuple(n / self.steps for n in acceptance.steps_accepting_position(self.histogram))


@dataclass(frozen=True, slots=True)
class ClassStats:
    """Everything measured for one (variant, class) — or the variant's "all" row — over a window."""

    requests: int = 0  # finished, successful, non-warm-up
    errors: dict[str, int] = field(default_factory=dict)  # ErrorKind value -> count
    output_tokens: int = 0
    latency: dict[str, Percentiles] = field(default_factory=dict)  # Metric value -> Percentiles
    acceptance: AcceptanceStats = field(default_factory=AcceptanceStats)
    structured_total: int = 0
    structured_failed: int = 0
    timing_source: str = "none"  # CountSource of server_queue/prefill/decode
    window_s: float = 0.0

    @property
    def structured_failure_rate(self) -> float | None:
        return self.structured_failed / self.structured_total if self.structured_total else None

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.window_s if self.window_s > 0 else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0


ALL_CLASSES = "all"


@dataclass(frozen=True, slots=True)
class VariantStats:
    variant: str
    classes: dict[str, ClassStats] = field(default_factory=dict)  # includes ALL_CLASSES

    @property
    def total(self) -> ClassStats:
        return self.classes.get(ALL_CLASSES, ClassStats())


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """The load generator's view of itself: numbers from a saturated client are not the server's."""

    schedule_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    cpu_percent: float = 0.0
    in_flight: int = 0
    saturated: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float  # seconds since run start
    interval: int  # index of the last closed 1 s interval
    cumulative: dict[str, VariantStats] = field(default_factory=dict)  # since the end of warm-up
    last_interval: dict[str, VariantStats] = field(default_factory=dict)  # the last closed interval
    servers: dict[str, ServerSample] = field(default_factory=dict)  # latest sample per variant
    health: ClientHealth = field(default_factory=ClientHealth)
    events: tuple[Event, ...] = ()  # events since the previous snapshot
    saturated_intervals: tuple[int, ...] = ()
    paused: bool = False
    finished: bool = False
    simulated: bool = True
