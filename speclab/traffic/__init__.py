"""Scenario → schedule → streaming client → RequestRecords, in isolated worker processes.

Public entry points: ``build_plan`` (schedule), ``Target`` and ``run_request`` (client),
``TrafficEngine`` (one worker's loop, usable in-process), ``TrafficRunner`` (the parent's facade)
and ``WorkerHealth`` (whether the client kept up).
"""

from __future__ import annotations

from .client import Target, run_request
from .engine import TrafficEngine
from .health import WorkerHealth
from .runner import TrafficRunner, TrafficSummary
from .schedule import Plan, PlannedRequest, build_plan

__all__ = [
    "Plan",
    "PlannedRequest",
    "Target",
    "TrafficEngine",
    "TrafficRunner",
    "TrafficSummary",
    "WorkerHealth",
    "build_plan",
    "run_request",
]
