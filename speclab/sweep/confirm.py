"""The confirmation pass: the recommended schedule against the best fixed k and k = 0 over the ladder.

The schedule is chosen from the grid's cells, so it is run again, beside the best fixed k and the
baseline on the same traffic, to see that it holds. At every level it must be within noise of (or
better than) the better of the two fixed arms there, on each measure; where it is not, the report
names the level, the measure and by how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .cells import ALL, MEASURES
from .grid import CellConfig
from .noise import Spread
from .reduce import (
    CROSSOVER_MEASURES,
    CellGroup,
    Groups,
    classes_of,
    compare_cells,
    configs_of,
    levels_of,
    primary_group,
)


def best_fixed_k(groups: Groups, *, objective: str = "throughput", prompt_class: str = ALL) -> CellConfig | None:
    """The fixed k > 0 (primary batch-settings group) with the best geometric-mean ratio to k = 0 over
    the levels where both were measured; the smaller k on equal scores."""
    configs = configs_of(groups)
    if not configs:
        return None
    group = primary_group(groups)
    higher = MEASURES[objective].higher_is_better
    scores: list[tuple[float, int, CellConfig]] = []
    for config in configs:
        if not config.fixed or not config.speculative or config.group() != group:
            continue
        logs = []
        for level in levels_of(groups):
            arm, base = groups.get((config, level)), groups.get((config.baseline(), level))
            a = arm.spread(prompt_class, objective) if arm is not None and arm.ok else None
            b = base.spread(prompt_class, objective) if base is not None and base.ok else None
            if a and b and a.median > 0 and b.median > 0:
                logs.append(math.log(a.median / b.median if higher else b.median / a.median))
        if logs:
            scores.append((sum(logs) / len(logs), -config.k, config))
    return max(scores, key=lambda s: (s[0], s[1]))[2] if scores else None


def confirmation_configs(schedule: CellConfig | None, best_fixed: CellConfig | None) -> list[CellConfig]:
    """The arms the driver runs in the confirmation pass (phase ``confirm``), baseline first."""
    arms = [c for c in (schedule, best_fixed) if c is not None]
    if not arms:
        return []
    out = [arms[0].baseline()]
    out += [c for c in arms if c not in out]
    return out


def confirmation(groups: Groups, *, schedule: CellConfig, best_fixed: CellConfig, tolerance: float,
                 min_requests: int, measures: Sequence[str] = CROSSOVER_MEASURES) -> dict[str, Any]:
    """Per class, measure and level: the schedule against the better fixed arm there (``groups`` of phase confirm)."""
    baseline = best_fixed.baseline()
    rows: list[dict[str, Any]] = []
    where_not: list[dict[str, Any]] = []
    for prompt_class in classes_of(groups):
        for measure in measures:
            higher = MEASURES[measure].higher_is_better
            for level in levels_of(groups):
                fixed = [g for g in (groups.get((best_fixed, level)), groups.get((baseline, level))) if g is not None and g.ok]
                scored: list[tuple[CellGroup, Spread]] = []
                for g in fixed:
                    s = g.spread(prompt_class, measure)
                    if s is not None:
                        scored.append((g, s))
                if not scored:
                    continue
                best, _ = max(scored, key=lambda gs: gs[1].median if higher else -gs[1].median)
                cmp = compare_cells(groups.get((schedule, level)), best, prompt_class, measure, tolerance=tolerance,
                                    min_requests=min_requests)
                row = {"class": prompt_class, "measure": measure, "load": level.value, "best_fixed_k": best.config.k,
                       **cmp.as_dict(), "within_noise": cmp.verdict in ("win", "tie")}
                rows.append(row)
                if cmp.verdict == "loss":
                    where_not.append({k: row[k] for k in ("class", "measure", "load", "best_fixed_k", "ratio", "reason")})
    measured = [r for r in rows if r["verdict"] != "unmeasured"]
    return {"schedule_arm": schedule.as_dict(), "best_fixed_k": best_fixed.k, "baseline_k": 0,
            "within_noise_everywhere": bool(measured) and not where_not, "where_not": where_not,
            "unmeasured": [{k: r[k] for k in ("class", "measure", "load", "reason")} for r in rows if r["verdict"] == "unmeasured"],
            "levels": rows}
