"""The simulator's time scale: one modelled second lasts S wall seconds (docs/simulator.md).

Everything a user writes is modelled time; the load generator works in wall time. This module is
the one place that converts: ``TimeScale.ingest`` divides a record's client-measured timestamps by
S as the record arrives, and ``to_wall`` stretches what a user wrote (rates, delays, timeouts).
Server-reported figures (per-request ``metrics``, ``/metrics`` histograms) are modelled already and
are never touched. The client's own health (schedule lag, loop lag, CPU) is judged before this.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .errors import InputError
from .records import RequestRecord

AUTO: Final = "auto"
# Calibration of this project's reference host (2 cores, measured with bench/bench_time_scale.py,
# docs/simulator.md "Time scale"): the running sequences, weighted by WEIGHT_PER_DRAFT_TOKEN per
# draft token, that all of a run's simulators together keep on their modelled clock at S = 1 with a
# valid client. The default lab at 96 in flight each (64 running per simulator, 288 weighted) kept
# its clock (drift p99 0.06 of a step) with a valid client at S = 12, and not at 4 (25 steps) or 6
# (0.13 of a step). Re-measured after the faster engine (--runs 96:5,96:6,96:8): drift p99 0.153,
# 0.118 and 0.079 of a step, the client saturated in 11-12 of 12 intervals at each, so the smallest
# valid S is still above 8 and the capacity stays 288 / 12. With the engine core in its own process
# (--runs 96:6,96:8,96:10) the simulators kept their clock at all three (drift p99 under 0.02 of a
# step), but the client's event-loop lag flagged every interval of every run, S = 12 included: on
# that host no scale tried (6-12) gave a valid client at this load, so the capacity was not changed.
# With the health limits refitted to feed stamps, on a quiet host (--runs 96:auto,96:16,96:24): the
# clock held at all three (drift p99 under 0.01 of a step) and the client was saturated in 10, 8 and
# 4 of 12 intervals (exit 5, 5, 0); at S = 12 two earlier runs gave 6 and 7 of 12 (exit 0 and 5). So
# of the scales tried (12, 16, 24; not 20) the smallest with a valid client is 24: capacity 288 / 24.
HOST_CAPACITY_SEQS: Final = 12.0
WEIGHT_PER_DRAFT_TOKEN: Final = 0.25
# A typical modelled time per output token (sim-8b on an H100 at a moderate batch), used only to
# turn an open-loop rate into sequences in flight by Little's law.
REFERENCE_TPOT_S: Final = 0.006
_STEP: Final = 0.5  # auto rounds S up to a multiple of this


def parse_time_scale(value: str | float | None) -> float | None:
    """``--time-scale S|auto`` -> S, or None for auto. Below 1 (or not a number) is bad input."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return None
    try:
        scale = float(value)
    except ValueError:
        raise InputError(f"--time-scale: expected a number >= 1 or 'auto', got {value!r}") from None
    if not scale >= 1.0 or math.isinf(scale):
        raise InputError(f"--time-scale: must be >= 1 (1: modelled time runs at wall speed), got {value!r}")
    return scale


@dataclass(frozen=True, slots=True)
class SimLoad:
    """One simulator's planned load: the sequences it will run at once and its draft length."""

    variant: str
    running: float
    num_speculative_tokens: int = 0

    @property
    def weight(self) -> float:
        return self.running * (1.0 + WEIGHT_PER_DRAFT_TOKEN * self.num_speculative_tokens)


def auto_time_scale(loads: Iterable[SimLoad], capacity: float = HOST_CAPACITY_SEQS) -> tuple[float, str]:
    """The smallest S (a multiple of 0.5, at least 1) at which the host keeps up with every
    simulator's load together, and a one-line reason."""
    loads = list(loads)
    demand = sum(load.weight for load in loads)
    scale = max(1.0, math.ceil(demand / capacity / _STEP - 1e-9) * _STEP)
    parts = ", ".join(f"{load.variant} {load.running:.0f}" + (f" (k={load.num_speculative_tokens})"
                                                              if load.num_speculative_tokens else "")
                      for load in loads)
    return scale, (f"auto: {demand:.0f} weighted running sequences ({parts}) against {capacity:g} this host "
                   f"keeps at S=1")


def fitting_scale(current: float, drift_s: float, step_s: float) -> float:
    """A time scale that would have fitted a run whose simulator trailed by ``drift_s`` per
    ``step_s`` of modelled step: the host needed about (1 + drift/step) times the wall time."""
    need = current * (1.0 + (drift_s / step_s if step_s > 0 else 1.0))
    return max(current + _STEP, math.ceil(need / _STEP) * _STEP)


@dataclass(frozen=True, slots=True)
class TimeScale:
    """One run's S. ``ingest`` is the only place measured durations are divided by it."""

    s: float = 1.0
    reason: str = ""

    @property
    def scaled(self) -> bool:
        return self.s != 1.0

    def to_model(self, wall_s: float) -> float:
        return wall_s / self.s

    def to_wall(self, modelled_s: float) -> float:
        return modelled_s * self.s

    def rate_to_wall(self, modelled_rate: float) -> float:
        return modelled_rate / self.s

    def ingest(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """Records from the load generator (run-clock wall seconds) -> modelled seconds, in place."""
        if self.s == 1.0:
            return records
        s = self.s
        for r in records:
            r.intended /= s
            if r.sent is not None:
                r.sent /= s
            if r.first_token is not None:
                r.first_token /= s
            if r.last_token is not None:
                r.last_token /= s
            if r.done is not None:
                r.done /= s
        return records

    def label(self) -> str:
        """What every scaled figure carries; empty at S = 1."""
        return f"time scale {self.s:g}: figures in modelled time" if self.scaled else ""
