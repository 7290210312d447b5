"""speclab's own metrics for Prometheus: a collector over the newest snapshot of the stream.

Counters and histograms are the snapshot's cumulative view of every config epoch (``epochs``),
which is what a Prometheus counter is: everything since the start, late records included, warm-up
excluded, never summed across epochs — so they equal the report built from the final snapshot. Per
interval views would not do: an interval holds a variant's newest epoch only, and records that
arrive after their interval closed are in the cumulative view alone. Every series is labelled
``variant``, ``epoch`` and ``class`` (no "all" row: Prometheus sums). ``speclab_config_info`` has one
series per variant, its current epoch's configuration as labels, so a relaunch ends one series and
starts another; ``speclab_variant_epoch`` steps at the same moment, for ``changes()``.

A sweep runs each cell as a session of its own; ``begin_part`` starts the next cell's stretch, with
the cell's number as its ``epoch`` label and its id and load level on ``speclab_config_info``, so
the counters of every finished cell stay up beside the running one, and each cell ends one
``speclab_config_info`` label set and starts the next, as a relaunch does.

Under a simulator time scale S the counters count modelled events and the histograms hold modelled
seconds, as the report does, but Prometheus's ``rate()`` is per wall second, S times too low:
``speclab_time_scale`` serves S (1 for real servers), so a per-second panel multiplies its rate by it
(docs/monitoring.md), and ``speclab_config_info`` carries it as ``time_scale``. S is the run's
(``run["time_scale"]``, or ``set_time_scale``); a sweep's cells may each have their own, so the
gauge holds the running cell's.

Every (variant, epoch, class) series is served from the epoch's first snapshot, at zero until its
first request finishes: a class whose requests all finish between two scrapes still shows as an
increase, so ``rate()`` and ``histogram_quantile`` panels have the baseline they need. The classes
are the scenario's (``expect_classes``) and any a snapshot names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from speclab.model.epochs import EpochInfo
from speclab.model.latency_metrics import LATENCY_METRICS
from speclab.model.names import LATENCY_BUCKETS_S
from speclab.model.names import Metric as Latency
from speclab.model.snapshot import ALL_CLASSES, ClassStats, Snapshot

PREFIX: Final = "speclab_"
KEY_LABELS: Final = ("variant", "epoch", "class")
Row = tuple[tuple[str, str, str], ClassStats, int]  # (variant, epoch, class), its stats, the epoch's k
# Each latency of docs/measurements.md as a histogram: name (without prefix), help.
LATENCY_SERIES: Final[dict[Latency, tuple[str, str]]] = {m.metric: (m.prom, m.prom_help) for m in LATENCY_METRICS}
CONFIG_LABELS: Final = ("variant", "epoch", "label", "lab", "target_model", "target_revision", "draft_model",
                        "draft_revision", "method", "k", "max_num_seqs", "max_num_batched_tokens",
                        "enable_chunked_prefill", "simulated", "time_scale", "cell", "load")


def _scale(value: Any) -> float:
    """A time scale S as served: a number ≥ 1 (none given: 1, as for real servers)."""
    s = 1.0 if value is None else float(value)
    if not s >= 1.0:
        raise ValueError(f"time scale {value!r}: expected a number of at least 1")
    return s


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Part:
    """A stretch of the exposition fed by one session: a whole run, or one sweep cell (``epoch`` then
    replaces the session's own epoch numbers, ``labels`` adds ``cell`` and ``load`` to the config)."""

    epoch: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    snapshot: Snapshot | None = None


class SpeclabCollector(Collector):
    """Serves the newest snapshot handed to ``update`` (called by the session for every one).

    ``run`` holds facts fixed for the run (``lab`` and the pair's keys, as reports carry them, and
    ``time_scale``, the simulators' S).
    """

    def __init__(self, run: Mapping[str, Any] | None = None) -> None:
        self._run = dict(run or {})
        self._time_scale = _scale(self._run.get("time_scale"))
        # (finished parts, the current part), swapped as one reference: the HTTP thread reads whole states.
        self._state: tuple[tuple[Part, ...], Part] = ((), Part())
        self._parts = False
        self._ended = False
        self._classes: dict[str, None] = {}  # every class to serve, in order

    def expect_classes(self, classes: Iterable[str]) -> None:
        """Serve these classes (the scenario's) at zero in every epoch before their first request."""
        self._classes = {**self._classes, **dict.fromkeys(c for c in classes if c != ALL_CLASSES)}

    def update(self, snapshot: Snapshot) -> None:
        done, part = self._state
        if part.snapshot is not None and part.snapshot.finished:
            return  # a part's final snapshot is its last word: nothing published after it may replace it
        self._state = (done, replace(part, snapshot=snapshot))

    def set_time_scale(self, scale: float) -> None:
        """The simulators' S from now on (a session sets its own; a sweep's cell its level's)."""
        self._time_scale = _scale(scale)

    @property
    def time_scale(self) -> float:
        return self._time_scale

    def begin_part(self, epoch: str, labels: Mapping[str, str], time_scale: float | None = None) -> None:
        """Keep what was served so far and start the next part (a sweep's next cell, at ``time_scale``
        when given)."""
        if time_scale is not None:
            self.set_time_scale(time_scale)
        done, part = self._state
        self._parts = True
        self._state = ((*done, part) if part.snapshot is not None else done, Part(epoch, dict(labels)))

    def end(self) -> None:
        """A run in parts is over (``speclab_run_finished`` 1); a single run ends with its final snapshot."""
        self._ended = True

    @property
    def snapshot(self) -> Snapshot | None:
        return self._state[1].snapshot

    def describe(self) -> list[Metric]:
        return []  # series come and go with variants and epochs; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        done, part = self._state
        served = [(p, p.snapshot) for p in (*done, part) if p.snapshot is not None]
        yield from self._run_series([snap for _, snap in served])
        if not served:
            return
        rows = self._rows(served)
        yield from _counters(rows)
        yield from _histograms(rows)
        yield from self._config(served)
        yield from _health(served[-1][1])
        yield from _transitions([snap for _, snap in served])

    def _rows(self, served: list[tuple[Part, Snapshot]]) -> list[Row]:
        seen = [cls for _, snap in served for epochs in snap.epochs.values() for e in epochs for cls in e.stats.classes]
        classes = dict.fromkeys([*self._classes, *(c for c in seen if c != ALL_CLASSES)])
        zero = ClassStats()
        return [((variant, p.epoch or str(e.info.epoch), cls), e.stats.classes.get(cls, zero),
                 int(e.info.settings.get("num_speculative_tokens") or 0))
                for p, snap in served for variant, epochs in snap.epochs.items() for e in epochs for cls in classes]

    def _run_series(self, snaps: list[Snapshot]) -> Iterator[Metric]:
        t = GaugeMetricFamily(PREFIX + "run_elapsed_seconds", "Run clock (modelled time under a time scale; a "
                              "sweep: its cells' clocks added up).")
        t.add_metric([], sum(s.t for s in snaps))
        finished = self._ended if self._parts else bool(snaps and snaps[-1].finished)
        done = GaugeMetricFamily(PREFIX + "run_finished", "1 once the final snapshot is out.")
        done.add_metric([], 1.0 if finished else 0.0)
        scale = GaugeMetricFamily(PREFIX + "time_scale", "Wall seconds per modelled second: the simulators' time "
                                  "scale S (1: real servers). Counters count modelled events but rate() is per wall "
                                  "second: rate() * speclab_time_scale is per modelled second.")
        scale.add_metric([], self._time_scale)
        yield t
        yield done
        yield scale

    def _config(self, served: list[tuple[Part, Snapshot]]) -> Iterator[Metric]:
        info = GaugeMetricFamily(PREFIX + "config_info", "Each variant's current configuration (value 1); a relaunch "
                                 "(or a sweep's next cell) ends one label set and starts the next.", labels=CONFIG_LABELS)
        epoch = GaugeMetricFamily(PREFIX + "variant_epoch", "Each variant's current config epoch (a sweep: its "
                                  "latest cell's number).", labels=["variant"])
        latest = {variant: float(p.epoch or epochs[-1].info.epoch)
                  for p, snap in served for variant, epochs in snap.epochs.items() if epochs}
        part, snap = served[-1]
        for variant, epochs in snap.epochs.items():
            if epochs:
                values = self._config_values(variant, epochs[-1].info, part, snap.simulated)
                info.add_metric([_text(values.get(k)) for k in CONFIG_LABELS], 1.0)
        for variant, value in latest.items():
            epoch.add_metric([variant], value)
        yield info
        yield epoch

    def _config_values(self, variant: str, current: EpochInfo, part: Part, simulated: bool) -> dict[str, Any]:
        run, s = self._run, current.settings
        k = s.get("num_speculative_tokens") or 0
        speculative = bool(k)
        return {
            "variant": variant, "epoch": part.epoch or str(current.epoch), "label": current.label or variant,
            "lab": run.get("lab"), "target_model": run.get("target_model"), "target_revision": run.get("target_revision"),
            "draft_model": run.get("draft_model") if speculative else "",
            "draft_revision": run.get("draft_revision") if speculative else "",
            "method": (s.get("method") or run.get("draft_method")) if speculative else "",
            "k": k, "max_num_seqs": s.get("max_num_seqs"), "max_num_batched_tokens": s.get("max_num_batched_tokens"),
            "enable_chunked_prefill": s.get("enable_chunked_prefill"), "simulated": simulated,
            "time_scale": f"{self._time_scale:g}", **part.labels,
        }


def _counters(rows: list[Row]) -> Iterator[Metric]:
    def family(name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(PREFIX + name, doc, labels=[*KEY_LABELS, *extra])

    requests = family("requests", "Requests that finished successfully (warm-up excluded).")
    errors = family("request_errors", "Requests that failed, by error kind (the documented kinds).", ("kind",))
    tokens = family("output_tokens", "Output tokens of successful requests.")
    drafted = family("spec_decode_draft_tokens", "Draft tokens proposed.")
    accepted = family("spec_decode_accepted_tokens", "Draft tokens accepted by the target.")
    steps = family("spec_decode_verify_steps", "Verify steps (verifications); per request = this / requests.")
    s_total = family("structured_output_requests", "Responses that had a JSON schema, regex or grammar.")
    s_failed = family("structured_output_failures", "Responses that failed their schema / regex / grammar.")
    for key, c, _ in rows:
        labels = list(key)
        requests.add_metric(labels, c.requests)
        for kind, n in sorted(c.errors.items()):
            errors.add_metric([*labels, kind], n)
        tokens.add_metric(labels, c.output_tokens)
        drafted.add_metric(labels, c.acceptance.drafted)
        accepted.add_metric(labels, c.acceptance.accepted)
        steps.add_metric(labels, c.acceptance.steps)
        s_total.add_metric(labels, c.structured_total)
        s_failed.add_metric(labels, c.structured_failed)
    yield from (requests, errors, tokens, drafted, accepted, steps, s_total, s_failed)


def _histograms(rows: list[Row]) -> Iterator[Metric]:
    bounds = [_text(float(b)) for b in LATENCY_BUCKETS_S]
    for metric, (name, doc) in LATENCY_SERIES.items():
        family = HistogramMetricFamily(PREFIX + name, doc, labels=list(KEY_LABELS))
        for key, c, _ in rows:
            p = c.latency.get(metric.value)
            if p is None or not p.count:
                family.add_metric(list(key), [*((b, 0.0) for b in bounds), ("+Inf", 0.0)], sum_value=0.0)
                continue
            if not p.buckets:
                continue
            buckets = [*zip(bounds, (float(n) for n in p.buckets), strict=True), ("+Inf", float(p.count))]
            family.add_metric(list(key), buckets, sum_value=p.mean * p.count / 1_000_000.0)
        yield family
    length = HistogramMetricFamily(PREFIX + "spec_decode_acceptance_length",
                                   "Tokens per verify step, bonus token included (1 + drafts accepted in the step).",
                                   labels=list(KEY_LABELS))
    for key, c, k in rows:
        hist = c.acceptance.histogram
        if not hist or not sum(hist):
            if k:  # 1..k+1 tokens per step, as the first verify steps will fill them
                length.add_metric(list(key), [*((str(float(j)), 0.0) for j in range(1, k + 2)), ("+Inf", 0.0)],
                                  sum_value=0.0)
            continue
        cumulative, buckets = 0, []
        for j, n in enumerate(hist):
            cumulative += n
            buckets.append((str(float(j + 1)), float(cumulative)))
        buckets.append(("+Inf", float(cumulative)))
        length.add_metric(list(key), buckets, sum_value=float(sum((j + 1) * n for j, n in enumerate(hist))))
    yield length


def _health(snap: Snapshot) -> Iterator[Metric]:
    h = snap.health
    # The client's own health is judged in wall time, before any time scale's division.
    for name, doc, value in (
        ("client_schedule_lag_p99_seconds", "The load generator's schedule lag p99 in its last report (wall time).",
         h.schedule_lag_p99_ms / 1000.0),
        ("client_loop_lag_max_seconds", "The load generator's worst event-loop lag in its last report (wall time).",
         h.loop_lag_max_ms / 1000.0),
        ("client_send_delay_p99_seconds", "The load generator's send delay p99 (sent stamp to the request's "
         "write) in its last report (wall time).", h.send_delay_p99_ms / 1000.0),
        ("client_read_lateness_seconds", "The load generator's read lateness p99.5 in its last report (wall time).",
         h.read_lateness_ms / 1000.0),
        ("client_cpu_ratio", "The busiest traffic worker's CPU use, 1 = one core.", h.cpu_percent / 100.0),
        ("client_in_flight_requests", "Requests in flight at the workers' last report.", float(h.in_flight)),
        ("client_saturated", "1 while the load generator cannot keep up (its numbers describe itself).",
         1.0 if h.saturated else 0.0),
    ):
        g = GaugeMetricFamily(PREFIX + name, doc)
        g.add_metric([], value)
        yield g
    sat = CounterMetricFamily(PREFIX + "client_saturated_intervals", "Intervals in which the client could not keep up.")
    sat.add_metric([], float(len(snap.saturated_intervals)))
    yield sat


def _transitions(snaps: list[Snapshot]) -> Iterator[Metric]:
    labels = ["variant", "from_epoch", "to_epoch"]
    requests = CounterMetricFamily(PREFIX + "transition_requests", "Requests that fell in a relaunch's transition "
                                   "(reported in neither epoch).", labels=labels)
    errors = CounterMetricFamily(PREFIX + "transition_request_errors", "Failed requests among them.", labels=labels)
    for snap in snaps:
        for t in snap.transitions:
            key = [t.variant, str(t.from_epoch), str(t.to_epoch)]
            requests.add_metric(key, float(t.requests))
            errors.add_metric(key, float(t.error_count))
    yield requests
    yield errors
