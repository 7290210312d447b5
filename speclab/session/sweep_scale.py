"""The sweep's time scale: one S per load level, held by every configuration at that level.

A cell is a run of its own with one simulator, so the run's one S is the cell's. The cells a
sweep compares are the configurations at one level, so they all run at the S the heaviest of them
needs (auto) and their figures carry the same share of the client's own wall-time cost. Levels
differ by far more: one request in flight keeps its clock at S = 1 where 256 with k = 4 need
about 20, and one S for the whole sweep would stretch every light cell twenty-fold for nothing.
``--time-scale S`` holds for every cell. On ``--resume`` a level keeps the S its finished cells ran
at, so a resumed level is never compared across two scales.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from speclab.model.lab import Lab
from speclab.model.time_scale import TimeScale
from speclab.servers.backends import EngineId
from speclab.sweep import CellPlan, CellResult, LoadLevel
from speclab.traffic.schedule import Plan

from .sweep_lab import cell_lab
from .time_scale import resolve_time_scale


def level_scales(plans: Iterable[CellPlan], *, asked: float | None, engine: EngineId | None, lab: Lab,
                 traffic: Callable[[CellPlan], Plan], finished: Iterable[CellResult] = ()) -> dict[LoadLevel, TimeScale]:
    """Each load level's S: the given one, the one its finished cells ran at, or auto's for its heaviest cell."""
    kept = {c.load: float(c.source["time_scale"]) for c in finished if c.ok and c.source.get("time_scale")}
    out: dict[LoadLevel, TimeScale] = {}
    for plan in plans:
        if plan.load in kept:
            out[plan.load] = TimeScale(kept[plan.load], "kept from the level's finished cells (--resume)")
            continue
        cell, variant = cell_lab(lab, plan.config)
        chosen = resolve_time_scale(asked, engine=engine, lab=cell, variants=(variant,), plan=traffic(plan))
        if plan.load not in out or chosen.s > out[plan.load].s:
            out[plan.load] = TimeScale(chosen.s, f"{chosen.reason}; the heaviest cell at {plan.load.label}"
                                       if asked is None else chosen.reason)
    return out


def scale_summary(scales: Mapping[LoadLevel, TimeScale]) -> dict[str, Any]:
    """``sweep.json``'s ``time_scale`` (the largest S, what a label needs) and ``time_scale_by_load``."""
    values = [s.s for s in scales.values()]
    return {"time_scale": max(values, default=1.0),
            "time_scale_by_load": {level.label: scales[level].s for level in sorted(scales)}}


def scale_text(scales: Mapping[LoadLevel, TimeScale]) -> str:
    """One line for the header: ``time scale 1 at 1, 1 at 8, 3 at 32 ...`` or ``time scale 4``."""
    distinct = {s.s for s in scales.values()}
    if len(distinct) <= 1:
        return f"time scale {next(iter(distinct), 1.0):g}"
    return "time scale per load level: " + ", ".join(f"{scales[lv].s:g} at {lv.label}" for lv in sorted(scales))
