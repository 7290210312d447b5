"""Did a simulator keep its modelled clock? Judged per interval from its own ``/metrics``.

Each scrape carries the deltas of the simulator's step counters: steps, their modelled seconds and
their summed lateness (how far each step's real end trailed its modelled end, the quantity
``speclab_sim_clock_drift_seconds`` shows for the latest step). Their ratios are the interval's
mean modelled step and mean drift; the mean, not one step's, so a single late wake-up of a busy
host does not flag a second. An interval whose mean drift exceeds a tenth of the mean step, or
grew by more than a step since the previous one, is flagged as trailing for that simulator: the
latencies measured there include the host's slowness, not only the model's. Real servers serve no
such series and are never judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from speclab.model.names import INTERVAL_S
from speclab.model.records import ServerSample
from speclab.model.time_scale import fitting_scale

from .hdr import LatencyHistogram

DRIFT_STEP_SHARE = 0.1  # drift above this share of the modelled step: the simulator trails its clock
GROWTH_LIMIT = 0.02  # drift gained per modelled second above which the host could not keep up at all


@dataclass
class VariantDrift:
    # One drift per judged scrape (modelled seconds, at µs resolution; its count is the scrapes'),
    # and the scrapes' mean steps summed: memory that does not grow with the number of scrapes.
    drifts: LatencyHistogram = field(default_factory=LatencyHistogram)
    step_sum: float = 0.0
    trailing: list[int] = field(default_factory=list)  # flagged intervals, in order
    judged: set[int] = field(default_factory=set)  # intervals with at least one step
    first: tuple[float, float] | None = None  # (t, drift) of the first judged scrape
    last: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One simulator over the whole run."""

    variant: str
    intervals: int  # intervals in which it stepped
    trailing: tuple[int, ...]
    drift_p99_s: float
    step_mean_s: float
    growth: float  # drift gained per modelled second over the run (0: it held)

    @property
    def share(self) -> float:
        return len(self.trailing) / self.intervals if self.intervals else 0.0

    @property
    def fell_behind(self) -> bool:
        """The simulator could not keep up at all: its drift grew over the run, or exceeded a whole
        modelled step. A drift that stays under a step (a busy host waking the loop a little late)
        shifts every token by the same few milliseconds, so it is flagged per interval but leaves
        TPOT, and the run, valid."""
        return self.growth > GROWTH_LIMIT or self.drift_p99_s > self.step_mean_s

    def as_dict(self) -> dict[str, object]:
        return {"intervals": self.intervals, "trailing_intervals": list(self.trailing),
                "drift_p99_ms": round(self.drift_p99_s * 1000.0, 3), "step_mean_ms": round(self.step_mean_s * 1000.0, 3),
                "drift_growth_per_s": round(self.growth, 4)}


class DriftJudge:
    """Fed every ``ServerSample`` of a run (times modelled); answers which intervals trailed."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._by_variant: dict[str, VariantDrift] = {}

    def add(self, sample: ServerSample) -> str | None:
        """Judge one scrape; returns a one-line reason when the simulator starts trailing."""
        if not sample.up or sample.sim_steps <= 0:
            return None
        state = self._by_variant.setdefault(sample.variant, VariantDrift())
        interval = int(sample.t // self.interval_s)
        step = sample.sim_step_s / sample.sim_steps
        drift = sample.sim_drift_s / sample.sim_steps
        grew = state.last is not None and drift - state.last[1] > step
        state.drifts.record_s(drift)
        state.step_sum += step
        state.judged.add(interval)
        state.first = state.first or (sample.t, drift)
        state.last = (sample.t, drift)
        if (drift > DRIFT_STEP_SHARE * step or grew) and (not state.trailing or state.trailing[-1] != interval):
            episode = not state.trailing or state.trailing[-1] < interval - 1
            state.trailing.append(interval)
            if episode:  # one line when it starts trailing, not one per interval
                return (f"{sample.variant}: the simulator trails its modelled clock by {drift * 1000:.1f} ms "
                        f"(modelled step {step * 1000:.1f} ms); latencies from here include the host's slowness")
        return None

    def trailing(self) -> dict[str, list[int]]:
        return {v: list(s.trailing) for v, s in self._by_variant.items() if s.trailing}

    def verdicts(self) -> list[Verdict]:
        out = []
        for variant, s in self._by_variant.items():
            growth = 0.0
            if s.first and s.last and s.last[0] > s.first[0]:
                growth = max(0.0, (s.last[1] - s.first[1]) / (s.last[0] - s.first[0]))
            scrapes = s.drifts.count
            p99 = s.drifts.value_at_percentile(99.0) / 1e6 if scrapes else 0.0
            out.append(Verdict(variant, len(s.judged), tuple(s.trailing), p99,
                               s.step_sum / scrapes if scrapes else 0.0, growth))
        return out

    def fit(self, scale: float) -> float:
        """A time scale that would have let the slowest simulator keep its clock (an estimate): a
        drift that grew g modelled seconds per modelled second needs about S·(1 + g), with a fifth
        to spare; one that held but exceeded a tenth of the step needs S·(1 + drift/step)."""
        need = scale
        for v in self.verdicts():
            if not v.trailing:
                continue
            if v.growth > GROWTH_LIMIT:
                need = max(need, scale * (1.0 + v.growth) * 1.2, scale + 0.5)
            else:
                need = max(need, fitting_scale(scale, v.drift_p99_s, v.step_mean_s))
        return math.ceil(need * 2.0) / 2.0
