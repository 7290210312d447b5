"""How far a traffic worker's clock is from the coordinator's, and how sure we are.

Hosts share no monotonic clock, so each worker runs on ``time.monotonic() - offset``, with the
offset estimated NTP-style: the coordinator notes ``t0``, asks the worker for its clock reading
``r``, notes ``t1``; the worker's reading was taken somewhere in ``[t0, t1]``, so the true offset
lies in ``r - t1 .. r - t0``: the midpoint, plus or minus half the round trip. Of several probes
the one with the shortest round trip bounds it tightest. A worker whose bound exceeds the limit
cannot hold its share of the schedule to the coordinator's clock, and its intervals are flagged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..health import SCHEDULE_LAG_LIMIT_MS, WorkerHealth

CLOCK_BOUND_LIMIT_MS = SCHEDULE_LAG_LIMIT_MS  # the schedule's own tolerance: past it the plan is not one plan
PROBES = 8  # round trips per estimate (the shortest one is kept)


@dataclass(frozen=True, slots=True)
class Probe:
    """One round trip: coordinator clock before and after, the worker's reading in between."""

    sent: float
    remote: float
    received: float

    @property
    def rtt(self) -> float:
        return max(0.0, self.received - self.sent)


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Worker clock minus coordinator clock (seconds), true within ``± bound``."""

    offset: float
    bound: float

    def contains(self, offset: float) -> bool:
        return abs(offset - self.offset) <= self.bound


def estimate(probes: Iterable[Probe]) -> ClockOffset:
    """The offset from the probe with the shortest round trip (ValueError for none)."""
    best = min(probes, key=lambda p: p.rtt)
    return ClockOffset(best.remote - (best.sent + best.received) / 2.0, best.rtt / 2.0)


def discipline(current: float | None, new: ClockOffset) -> float:
    """The offset the worker should run on: kept while the new estimate still allows it (so a
    worker's clock does not jitter by each probe's noise), stepped to the new midpoint when not."""
    if current is not None and new.contains(current):
        return current
    return new.offset


def annotate(health: WorkerHealth, node: str, clock: ClockOffset | None) -> WorkerHealth:
    """A worker's health report with its node and clock; an interval whose clock bound is past
    the limit is flagged saturated, with the reason, like any other the client could not hold."""
    if clock is None:
        return replace(health, node=node)
    bound_ms = clock.bound * 1000.0
    saturated, reason = health.saturated, health.reason
    if bound_ms > CLOCK_BOUND_LIMIT_MS:
        why = f"clock offset bound ±{bound_ms:.1f} ms > {CLOCK_BOUND_LIMIT_MS:g} ms"
        saturated, reason = True, f"{reason}; {why}" if reason else why
    return replace(health, node=node, clock_offset_ms=clock.offset * 1000.0, clock_bound_ms=bound_ms,
                   saturated=saturated, reason=reason)
