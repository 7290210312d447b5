"""Every latency metric, declared once: its name, unit, source, label, definition, Prometheus series,
how it is read from a record and where it is shown.

The aggregator keeps a histogram for each entry, so every snapshot, window, ``.hlog`` tag
(``metric.class.variant.eN``), report block (``latency.NAME``) and ``speclab_`` histogram has it
without further changes; ``shown`` adds the views that pick a few (the app's spectra, the A/B
windows, ``compare``). The table of docs/measurements.md is ``markdown_table()`` (a test keeps
them equal). The entries' order is the order those views show them in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final

from .names import Metric
from .records import RequestRecord


class Source(str, Enum):
    CLIENT = "client"  # speclab's own clock (the run clock shared by every process on the host)
    SERVER = "server, per request"  # the response's per-request ``metrics``


class Shown(str, Enum):
    SPECTRUM = "spectrum"  # a spectrum chart on the app's latency tab (a corrected twin toggles with `c`)
    AB = "ab"  # kept for the A/B windows of relaunched variants
    COMPARE = "compare"  # a row of `speclab compare`


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


@dataclass(frozen=True, slots=True)
class LatencyMetric:
    """``value`` gives seconds for one successful record (None: not measured for it); ``prom`` is the
    series name after ``speclab_``; ``note`` is what the app writes under a spectrum's title."""

    metric: Metric
    label: str
    source: Source
    definition: str
    value: Callable[[RequestRecord], float | None]
    prom: str
    prom_help: str
    shown: frozenset[Shown] = frozenset()
    note: str = "client"

    @property
    def name(self) -> str:
        return self.metric.value


_ALL = frozenset(Shown)
_NOT_AB = frozenset({Shown.SPECTRUM, Shown.COMPARE})

LATENCY_METRICS: Final[tuple[LatencyMetric, ...]] = (
    LatencyMetric(Metric.E2E_CORRECTED, "e2e corrected", Source.CLIENT, "done − intended",
                  lambda r: r.e2e_corrected, "request_e2e_corrected_seconds",
                  "End-to-end latency from the intended send time.", frozenset({Shown.AB, Shown.COMPARE})),
    LatencyMetric(Metric.E2E, "e2e", Source.CLIENT, "done − sent", lambda r: r.e2e, "request_e2e_seconds",
                  "End-to-end latency, sent to done.", _ALL),
    LatencyMetric(Metric.TTFT_CORRECTED, "TTFT corrected", Source.CLIENT, "first_token − intended",
                  lambda r: r.ttft_corrected, "request_ttft_corrected_seconds",
                  "Time to first token from the intended send time.", frozenset({Shown.AB, Shown.COMPARE})),
    LatencyMetric(Metric.TTFT, "TTFT", Source.CLIENT, "first_token − sent", lambda r: r.ttft,
                  "request_ttft_seconds", "Time to first token, sent to first output token.", _ALL),
    LatencyMetric(Metric.SERVER_QUEUE, "server queue", Source.SERVER, "the response's `metrics.queue_time_ms`",
                  lambda r: _ms(r.server_queue_ms), "request_queue_seconds",
                  "Server queue time, from the response's per-request metrics.", _NOT_AB),
    LatencyMetric(Metric.SERVER_PREFILL, "prefill", Source.SERVER,
                  "the response's `metrics.time_to_first_token_ms` (vLLM counts it from scheduling, so it "
                  "excludes the queue)", lambda r: _ms(r.server_prefill_ms), "request_prefill_seconds",
                  "Server prefill time, from the per-request metrics.", _NOT_AB),
    LatencyMetric(Metric.SERVER_DECODE, "decode", Source.SERVER, "the response's `metrics.generation_time_ms`",
                  lambda r: _ms(r.server_decode_ms), "request_decode_seconds",
                  "Server decode time, from the per-request metrics.", _NOT_AB),
    LatencyMetric(Metric.TPOT, "TPOT", Source.CLIENT,
                  "(last_token − first_token) / (output_tokens − 1); requests with fewer than 2 output tokens "
                  "have none", lambda r: r.tpot, "request_tpot_seconds",
                  "Time per output token after the first: (last - first) / (tokens - 1).", _ALL,
                  note="client, per token"),
    LatencyMetric(Metric.SCHEDULE_LAG, "schedule lag", Source.CLIENT, "sent − intended: the load generator's own queue",
                  lambda r: r.schedule_lag, "request_schedule_lag_seconds", "Load generator lag: sent minus intended."),
)

BY_METRIC: Final[dict[Metric, LatencyMetric]] = {m.metric: m for m in LATENCY_METRICS}

# The parts of the latency split (``metrics/split.py``): with the client + transport remainder they
# add up to ``e2e_corrected`` per request, so they are a fixed composition, not a view to add to.
SPLIT_METRICS: Final[tuple[Metric, ...]] = (
    Metric.SCHEDULE_LAG, Metric.SERVER_QUEUE, Metric.SERVER_PREFILL, Metric.SERVER_DECODE,
)
SPLIT_REMAINDER: Final = ("client_transport", "client + transport")


def shown_in(view: Shown) -> tuple[Metric, ...]:
    return tuple(m.metric for m in LATENCY_METRICS if view in m.shown)


_SHOWN_TEXT: Final = {Shown.SPECTRUM: "app spectrum", Shown.AB: "A/B", Shown.COMPARE: "compare"}


def markdown_table() -> str:
    """The latency table of docs/measurements.md."""
    rows = ["| name | definition | source | label | Prometheus | also in |", "|---|---|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.definition} | {m.source.value} | {m.label} | `speclab_{m.prom}` "
             f"| {', '.join(_SHOWN_TEXT[v] for v in Shown if v in m.shown) or '–'} |"
             for m in sorted(LATENCY_METRICS, key=lambda m: list(Metric).index(m.metric))]
    return "\n".join(rows) + "\n"


def _check() -> None:
    missing = [m.value for m in Metric if m not in BY_METRIC]
    twice = len(BY_METRIC) != len(LATENCY_METRICS)
    if missing or twice or len({m.prom for m in LATENCY_METRICS}) != len(LATENCY_METRICS):
        raise RuntimeError(f"latency metric registry: missing {missing}, duplicated names: {twice}")


_check()
