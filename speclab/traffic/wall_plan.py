"""A plan in modelled time -> the same plan in wall time, for a simulator under a time scale S.

The load generator only knows wall time. Stretching the plan's every time by S (and dividing its
rates by S) keeps the arrival schedule identical in modelled time: request ``i`` is due S times
later, durations, warm-up, stall and request timeouts last S times longer. The closed-loop
concurrency and request counts are not times and stay as they are.
"""

from __future__ import annotations

import dataclasses

from .schedule import Plan, Segment


def wall_plan(plan: Plan, scale: float) -> Plan:
    """``plan`` with every time multiplied by ``scale`` and every rate divided by it."""
    if scale == 1.0:
        return plan
    return dataclasses.replace(
        plan,
        duration_s=None if plan.duration_s is None else plan.duration_s * scale,
        warmup_s=plan.warmup_s * scale,
        stall_timeout_s=plan.stall_timeout_s * scale,
        request_timeout_s=plan.request_timeout_s * scale,
        segments=tuple(Segment(s.start * scale, s.rate / scale, s.slope / (scale * scale)) for s in plan.segments),
        concurrency_steps=tuple((start * scale, n) for start, n in plan.concurrency_steps),
        time_scale=plan.time_scale * scale,
    )
