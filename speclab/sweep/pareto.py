"""The Pareto front of per-user against aggregate throughput, per arm.

Per user is output tokens per second one request sees (1000 / TPOT p50 ms); aggregate is the
output tokens per second the server delivers. Each arm traces a curve over the load ladder
(more load: more aggregate, less per user); the front is the points no other arm's point beats on
both at once, which is where each arm is the one to deploy.
"""

from __future__ import annotations

from typing import Any

from .cells import ALL
from .reduce import Groups, arm_labels, classes_of, configs_of, levels_of


def pareto(groups: Groups, prompt_class: str = ALL) -> dict[str, Any]:
    """``{"arms": {arm: [point, ...]}, "front": [point, ...]}``; a point has arm, load, per_user, aggregate."""
    labels = arm_labels(groups)
    arms: dict[str, list[dict[str, Any]]] = {}
    points: list[dict[str, Any]] = []
    for config in configs_of(groups):
        curve = []
        for level in levels_of(groups):
            group = groups.get((config, level))
            if group is None or not group.ok:
                continue
            user, agg = group.spread(prompt_class, "per_user"), group.spread(prompt_class, "throughput")
            if user is None or agg is None:
                continue
            point = {"arm": labels[config], "k": config.k, "load": level.value,
                     "per_user_tps": round(user.median, 3), "aggregate_tps": round(agg.median, 3)}
            curve.append(point)
            points.append(point)
        arms[labels[config]] = curve
    front = [p for p in points if not any(
        q is not p and q["per_user_tps"] >= p["per_user_tps"] and q["aggregate_tps"] >= p["aggregate_tps"]
        and (q["per_user_tps"] > p["per_user_tps"] or q["aggregate_tps"] > p["aggregate_tps"]) for q in points)]
    front.sort(key=lambda p: (p["aggregate_tps"], -p["per_user_tps"]))
    return {"class": prompt_class, "arms": arms, "front": front}


def pareto_by_class(groups: Groups) -> dict[str, dict[str, Any]]:
    return {name: pareto(groups, name) for name in classes_of(groups)}
