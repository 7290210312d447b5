"""Immutable snapshots: what the aggregator emits a few times a second and every front end consumes.

The UI, the headless printer and the recorder all read the same ``Snapshot`` stream; replay
produces it from a recording. Latencies are microseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from . import acceptance
from .epochs import EpochInfo, TransitionInfo
from .names import PERCENTILE_POINTS
from .records import Event, ServerSample
from .workers import WorkerRow


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Values at ``PERCENTILE_POINTS`` (µs), computed in one pass over a histogram's counts."""

    count: int = 0
    mean: float = 0.0
    values: tuple[int, ...] = ()  # aligned with PERCENTILE_POINTS; empty when count == 0
    # Values at or below each LATENCY_BUCKETS_S bound (cumulative, to the histogram's 3 significant
    # digits): filled in the cumulative view, which speclab's Prometheus histograms read; else empty.
    # Left out of equality: two views of one distribution are equal whether or not they counted them.
    buckets: tuple[int, ...] = field(default=(), compare=False)

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
    """Ratios of sums over requests (docs/measurements.md)."""

    requests: int = 0  # requests that contributed counts
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: tuple[int, ...] = ()  # summed per-request acceptance_histogram
    source: str = "none"  # CountSource: exact, estimated, or a mix reported as "estimated"
    position_drafts: tuple[int, ...] = ()  # [i] = verify steps that drafted position i
    position_source: str = "none"  # "exact", or "estimated" where some steps drafted fewer than k
    per_k: tuple[tuple[int, int, int], ...] = ()  # (k used, steps, accepted), where the server gave per-step counts

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
    def k_rows(self) -> tuple[tuple[int, int, float | None], ...]:
        """(k used, verify steps, acceptance length at that k) per k a step drafted."""
        return tuple((k, steps, acceptance.acceptance_length(steps, accepted)) for k, steps, accepted in self.per_k)

    @property
    def per_position(self) -> tuple[float, ...]:
        """P(draft position i accepted | drafted) = steps accepting > i drafts / steps that drafted
        position i (prefix acceptance). Without ``position_drafts`` every step is taken to have drafted
        every position of the histogram."""
        if not self.steps or not self.histogram:
            return ()
        accepting = acceptance.steps_accepting_position(self.histogram)
        drafts = self.position_drafts or (self.steps,) * len(accepting)
        return tuple(n / d if d else 0.0 for n, d in zip(accepting, drafts, strict=False))


@dataclass(frozen=True, slots=True)
class SplitRow:
    """The mean composition of a group of requests (µs): the parts plus ``remainder`` (client +
    transport) equal their mean ``e2e_corrected`` exactly. ``timed`` of ``requests`` had server
    timings; the others' server time is inside the remainder."""

    requests: int
    timed: int
    schedule_lag: float
    server_queue: float
    server_prefill: float
    server_decode: float
    remainder: float
    e2e_corrected: float

    @property
    def parts(self) -> tuple[float, ...]:
        return (self.schedule_lag, self.server_queue, self.server_prefill, self.server_decode, self.remainder)


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
    split_p50: SplitRow | None = None  # where the time goes for the requests at the e2e_corrected p50
    split_tail: SplitRow | None = None  # ... and for those at or above its p99

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
    """One variant in one config epoch (never summed across epochs)."""

    variant: str
    classes: dict[str, ClassStats] = field(default_factory=dict)  # includes ALL_CLASSES
    epoch: int = 1
    label: str = ""  # the epoch's label (``k4``, ``k4·2 (k=6)``); empty means the variant name

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
    send_delay_p99_ms: float = 0.0  # sent stamp to the request's write (the error's way out)
    read_lateness_ms: float = 0.0  # read lateness p99.5 (the error's way back)
    saturated: bool = False
    reason: str = ""
    nodes: int = 0  # cluster nodes the reporting workers ran on (0: local workers)
    workers: int = 0  # workers that reported the interval
    clock_bound_ms: float = 0.0  # the widest bound on a worker's clock offset (cluster workers)


@dataclass(frozen=True, slots=True)
class Accounting:
    """Where every request a variant's epoch was sent went (docs/measurements.md, "Config epochs"):
    planned = completed + errored + warm-up + in transition + lost, lost = begun but never recorded.
    ``planned`` is None until the traffic workers have reported it (the end of the run)."""

    planned: int | None = None
    completed: int = 0  # after warm-up, in the epoch
    errored: int = 0  # after warm-up, in the epoch, cancelled included
    warmup: int = 0  # measured but left out of every table
    in_transition: int = 0  # sent to this epoch, finished in the transition that ended it
    recorded: int = 0

    @property
    def lost(self) -> int | None:
        return None if self.planned is None else self.planned - self.recorded

    def as_dict(self) -> dict[str, int | None]:
        return {"planned": self.planned, "completed": self.completed, "errored": self.errored,
                "warmup": self.warmup, "in_transition": self.in_transition, "lost": self.lost}


@dataclass(frozen=True, slots=True)
class EpochStats:
    """One config epoch of a variant and everything measured in it since the end of warm-up."""

    info: EpochInfo
    stats: VariantStats
    accounting: Accounting = field(default_factory=Accounting)


@dataclass(frozen=True, slots=True)
class ABWindow:
    """One side of the A/B view: a variant's epoch over whole closed intervals, and the baseline
    (one baseline epoch) over exactly those intervals. ``first_interval`` is None while empty."""

    epoch: int
    label: str
    baseline_epoch: int
    baseline_label: str
    first_interval: int | None = None
    last_interval: int | None = None
    start_s: float = 0.0
    end_s: float = 0.0
    own: VariantStats = field(default_factory=lambda: VariantStats(""))
    baseline: VariantStats = field(default_factory=lambda: VariantStats(""))
    note: str = ""  # why the window is shorter than asked, if it is

    @property
    def intervals(self) -> int:
        if self.first_interval is None or self.last_interval is None:
            return 0
        return self.last_interval - self.first_interval + 1


@dataclass(frozen=True, slots=True)
class ABView:
    """The current epoch against the baseline over the same intervals, and the previous epoch over
    as many intervals just before its transition (against the baseline over those). Built by the
    aggregator from its merged interval windows, so percentiles are window percentiles."""

    variant: str
    baseline: str
    current: ABWindow
    previous: ABWindow | None = None
    relaunching: bool = False  # a transition is under way: the current window has stopped growing


@dataclass(frozen=True, slots=True)
class IntervalStats:
    """One closed interval as every table and chart reads it: per variant, its newest epoch with
    requests in it, warm-up excluded (``warmup_requests`` counts what was left out)."""

    index: int
    start_s: float
    end_s: float
    variants: dict[str, VariantStats] = field(default_factory=dict)
    warmup_requests: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float  # seconds since run start
    interval: int  # index of the last closed 1 s interval
    # Per variant, its current config epoch since the end of warm-up (``epochs`` has them all).
    cumulative: dict[str, VariantStats] = field(default_factory=dict)
    # Per variant, the last closed interval of the newest epoch that had requests in it.
    last_interval: dict[str, VariantStats] = field(default_factory=dict)
    servers: dict[str, ServerSample] = field(default_factory=dict)  # latest sample per variant
    health: ClientHealth = field(default_factory=ClientHealth)  # the latest interval's
    # The worst of every interval so far (the report's client figures are the run's, not the last one's).
    run_health: ClientHealth = field(default_factory=ClientHealth)
    # Each traffic worker apart (its node, latest and worst interval, clock): the app's worker panel.
    workers: tuple[WorkerRow, ...] = ()
    events: tuple[Event, ...] = ()  # events since the previous snapshot
    saturated_intervals: tuple[int, ...] = ()  # intervals whose numbers a saturated client affected
    saturated_sends: tuple[int, ...] = ()  # intervals in which the client itself was saturated
    paused: bool = False
    finished: bool = False
    simulated: bool = True
    epochs: dict[str, tuple[EpochStats, ...]] = field(default_factory=dict)  # every epoch, oldest first
    transitions: tuple[TransitionInfo, ...] = ()
    ab: dict[str, ABView] = field(default_factory=dict)  # per non-baseline variant
    # Every interval closed since the previous snapshot of this stream, oldest first.
    intervals: tuple[IntervalStats, ...] = ()
    # The first snapshot of a (re)built stream, e.g. after a replay seeks backwards: a consumer
    # forgets the intervals and events it kept, since ``intervals``/``events`` start over here.
    rebuilt: bool = False


def coalesce(older: Snapshot, newer: Snapshot) -> Snapshot:
    """One snapshot standing for two consecutive ones: the newer state with both snapshots'
    intervals and events, so a consumer that skips ``older`` loses nothing."""
    if newer.rebuilt:
        return newer
    return dataclasses.replace(newer, intervals=older.intervals + newer.intervals,
                               events=older.events + newer.events, rebuilt=older.rebuilt)
