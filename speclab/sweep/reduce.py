"""Per class: each arm against k = 0 at every load level, the crossover load, the best k per
level, and the acceptance length at which a crossover would fall where the grid reached none.

Every comparison pairs an arm with the k = 0 arm of the same batch settings at the same level
(the same prompts and seeds), over the repeats. The crossover on a measure is the lowest load
level at which the arm no longer beats k = 0 beyond noise (docs/sweep.md: ``sweep.json``
``crossover``); a level where either cell failed or fell short of the minimum requests is no
evidence either way and is skipped, saying so.

Break-even without the simulator: speculation pays while the acceptance length τ exceeds the
ratio of a speculative step's time to a plain step's (the step model's break-even). Per-token
time is step time over tokens per step, so that ratio is measured by τ × TPOT_k / TPOT_0 (and,
on throughput, τ × thr_0 / thr_k). Computing it from the cells rather than the step model keeps
this layer engine-agnostic: it holds for vLLM on a GPU as for the simulator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .cells import ALL, MEASURES, CellResult
from .grid import CellConfig, LoadLevel, order_configs, varying_settings
from .noise import Comparison, Spread, compare

CROSSOVER_MEASURES = ("tpot", "throughput")


@dataclass(frozen=True, slots=True)
class CellGroup:
    """The repeats of one configuration at one load level (failed repeats kept apart)."""

    config: CellConfig
    load: LoadLevel
    cells: tuple[CellResult, ...]

    @property
    def ok(self) -> tuple[CellResult, ...]:
        return tuple(c for c in self.cells if c.ok)

    def spread(self, prompt_class: str, measure: str) -> Spread | None:
        return Spread.of([c.value(prompt_class, measure) for c in self.ok])

    def short_of(self, prompt_class: str, min_requests: int) -> bool:
        ok = self.ok
        return not ok or any(c.requests(prompt_class) < min_requests for c in ok)

    def running_batch(self) -> int | None:
        values = [c.server.running_mean for c in self.ok if c.server is not None and c.server.running_mean is not None]
        return None if not values else max(1, round(sorted(values)[len(values) // 2]))


Groups = dict[tuple[CellConfig, LoadLevel], CellGroup]


def group_cells(cells: Iterable[CellResult], phase: str = "grid") -> Groups:
    found: dict[tuple[CellConfig, LoadLevel], list[CellResult]] = defaultdict(list)
    for cell in cells:
        if cell.plan.phase == phase:
            found[(cell.config, cell.load)].append(cell)
    return {key: CellGroup(key[0], key[1], tuple(sorted(v, key=lambda c: c.plan.repeat))) for key, v in found.items()}


def levels_of(groups: Groups) -> list[LoadLevel]:
    return sorted({load for _, load in groups})


def configs_of(groups: Groups) -> list[CellConfig]:
    return order_configs(config for config, _ in groups)


def primary_group(groups: Groups) -> tuple[int | None, int | None, bool | None] | None:
    """The batch-settings group the schedule, best k and best fixed k come from: the first (in grid
    order) with a finished cell, so a first group whose servers all failed does not blank them."""
    configs = configs_of(groups)
    ok = [c for c in configs if any(g.ok for (cfg, _), g in groups.items() if cfg.group() == c.group())]
    return (ok or configs)[0].group() if configs else None


def classes_of(groups: Groups) -> list[str]:
    names = {name for g in groups.values() for c in g.ok for name in c.classes}
    return [ALL, *sorted(names - {ALL})] if names else []


def arm_labels(groups: Groups) -> dict[CellConfig, str]:
    configs = configs_of(groups)
    varying = varying_settings(configs)
    return {c: c.arm(varying) for c in configs}


def compare_cells(arm: CellGroup | None, base: CellGroup | None, prompt_class: str, measure: str, *,
                  tolerance: float, min_requests: int) -> Comparison:
    if arm is None or base is None or not arm.ok or not base.ok:
        failed = [g.config.arm() for g in (arm, base) if g is not None and not g.ok]
        return Comparison("unmeasured", None, None, None,
                          f"cell failed ({', '.join(failed)})" if failed else "cell not run")
    if arm.short_of(prompt_class, min_requests) or base.short_of(prompt_class, min_requests):
        return Comparison("unmeasured", None, None, None, f"fewer than {min_requests} {prompt_class} requests")
    m = MEASURES[measure]
    return compare(arm.spread(prompt_class, measure), base.spread(prompt_class, measure),
                   higher_is_better=m.higher_is_better, tolerance=tolerance)


def comparisons(groups: Groups, *, tolerance: float, min_requests: int,
                measures: Sequence[str] = CROSSOVER_MEASURES) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """class -> arm -> per level ``{"load": value, measure: Comparison}`` for each speculative arm."""
    labels = arm_labels(groups)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for prompt_class in classes_of(groups):
        per_arm: dict[str, list[dict[str, Any]]] = {}
        for config in configs_of(groups):
            if not config.speculative:
                continue
            rows = []
            for level in levels_of(groups):
                arm, base = groups.get((config, level)), groups.get((config.baseline(), level))
                row: dict[str, Any] = {"load": level}
                for measure in measures:
                    row[measure] = compare_cells(arm, base, prompt_class, measure, tolerance=tolerance,
                                                 min_requests=min_requests)
                rows.append(row)
            per_arm[labels[config]] = rows
        out[prompt_class] = per_arm
    return out


def crossover_of(rows: Sequence[dict[str, Any]], measure: str) -> dict[str, Any]:
    """The lowest measured level at which the arm no longer wins on ``measure``, with what came after."""
    measured = [(r["load"], r[measure]) for r in rows if r[measure].verdict != "unmeasured"]
    skipped = [r["load"].value for r in rows if r[measure].verdict == "unmeasured"]
    at = next((load for load, cmp in measured if cmp.verdict != "win"), None)
    again = [load.value for load, cmp in measured if at is not None and load > at and cmp.verdict == "win"]
    last_win = max((load.value for load, cmp in measured if cmp.verdict == "win" and (at is None or load < at)),
                   default=None)
    return {"crossover": None if at is None else at.value, "last_win": last_win, "wins_again_at": again,
            "skipped": skipped, "verdict_at_crossover": None if at is None else
            next(cmp.verdict for load, cmp in measured if load == at)}


def crossovers(table: dict[str, dict[str, list[dict[str, Any]]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``crossover`` exactly as sweep.json pins it, the detail behind each value)."""
    pinned: dict[str, Any] = {}
    detail: dict[str, Any] = {}
    for prompt_class, per_arm in table.items():
        pinned[prompt_class], detail[prompt_class] = {}, {}
        for arm, rows in per_arm.items():
            found = {m: crossover_of(rows, m) for m in CROSSOVER_MEASURES}
            pinned[prompt_class][arm] = {m: found[m]["crossover"] for m in CROSSOVER_MEASURES}
            detail[prompt_class][arm] = {m: {**found[m], "levels": [
                {"load": r["load"].value, **r[m].as_dict()} for r in rows]} for m in CROSSOVER_MEASURES}
    return pinned, detail


def best_at(groups: Groups, level: LoadLevel, prompt_class: str, measure: str, *, tolerance: float,
            min_requests: int, group: tuple[Any, ...] | None = None) -> dict[str, Any] | None:
    """The best fixed k at ``level``: the best median, and among the arms tied with it the smallest k."""
    candidates = [g for (c, lv), g in groups.items() if lv == level and c.fixed and g.ok
                  and (group is None or c.group() == group) and not g.short_of(prompt_class, min_requests)]
    scored: list[tuple[CellGroup, Spread]] = []
    for g in candidates:
        s = g.spread(prompt_class, measure)
        if s is not None and s.median > 0:
            scored.append((g, s))
    if not scored:
        return None
    higher = MEASURES[measure].higher_is_better
    leader, lead = max(scored, key=lambda gs: gs[1].median if higher else -gs[1].median)
    tied = [g for g, s in scored if g is leader or compare(s, lead, higher_is_better=higher,
                                                           tolerance=tolerance).verdict in ("tie", "win")]
    chosen = min(tied, key=lambda g: g.config.k)
    base = next((g for g, _ in scored if g.config == chosen.config.baseline()), None)
    vs_base = None if base is None or base is chosen else compare(
        chosen.spread(prompt_class, measure), base.spread(prompt_class, measure), higher_is_better=higher,
        tolerance=tolerance)
    return {"k": chosen.config.k, "config": chosen.config, "leader_k": leader.config.k,
            "tied_with_leader": sorted(g.config.k for g in tied), "vs_k0": vs_base,
            "values": {g.config.k: s for g, s in sorted(scored, key=lambda gs: gs[0].config.k)}}


def best_k(groups: Groups, *, tolerance: float, min_requests: int,
           measures: Sequence[str] = CROSSOVER_MEASURES) -> dict[str, list[dict[str, Any]]]:
    """class -> per level the best fixed k on each measure (within the primary batch-settings group)."""
    group = primary_group(groups)
    out: dict[str, list[dict[str, Any]]] = {}
    for prompt_class in classes_of(groups):
        rows = []
        for level in levels_of(groups):
            row: dict[str, Any] = {"load": level.value}
            for measure in measures:
                best = best_at(groups, level, prompt_class, measure, tolerance=tolerance, min_requests=min_requests,
                               group=group)
                row[measure] = None if best is None else best["k"]
            rows.append(row)
        out[prompt_class] = rows
    return out


def speedups(groups: Groups) -> dict[str, dict[str, dict[str, list[dict[str, Any]]]]]:
    """class -> arm -> measure -> per level the speed-up over k = 0 (TPOT₀/TPOT_k, thr_k/thr₀) with the
    range the repeats allow: the numbers behind the speed-up plot and the app's heat map."""
    labels = arm_labels(groups)
    out: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for prompt_class in classes_of(groups):
        per_arm: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for config in configs_of(groups):
            if not config.speculative:
                continue
            per_arm[labels[config]] = {m: [] for m in CROSSOVER_MEASURES}
            for level in levels_of(groups):
                arm, base = groups.get((config, level)), groups.get((config.baseline(), level))
                if arm is None or base is None or not arm.ok or not base.ok:
                    continue
                for measure in CROSSOVER_MEASURES:
                    a, b = arm.spread(prompt_class, measure), base.spread(prompt_class, measure)
                    if not a or not b or min(a.median, a.low, b.median, b.low) <= 0:
                        continue
                    if MEASURES[measure].higher_is_better:
                        value, low, high = a.median / b.median, a.low / b.high, a.high / b.low
                    else:
                        value, low, high = b.median / a.median, b.low / a.high, b.high / a.low
                    per_arm[labels[config]][measure].append(
                        {"load": level.value, "speedup": round(value, 4), "low": round(low, 4), "high": round(high, 4)})
        out[prompt_class] = per_arm
    return out


def break_even(groups: Groups, *, min_requests: int) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """class -> arm -> per level the measured τ and the τ at which the arm would stop paying there."""
    labels = arm_labels(groups)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for prompt_class in classes_of(groups):
        per_arm: dict[str, list[dict[str, Any]]] = {}
        for config in configs_of(groups):
            if not config.speculative:
                continue
            rows = []
            for level in levels_of(groups):
                arm, base = groups.get((config, level)), groups.get((config.baseline(), level))
                if arm is None or base is None or arm.short_of(prompt_class, min_requests) \
                        or base.short_of(prompt_class, min_requests):
                    continue
                tau = arm.spread(prompt_class, "acceptance_length")
                tk, t0 = arm.spread(prompt_class, "tpot"), base.spread(prompt_class, "tpot")
                xk, x0 = arm.spread(prompt_class, "throughput"), base.spread(prompt_class, "throughput")
                if tau is None:
                    continue
                rows.append({
                    "load": level.value, "acceptance_length": round(tau.median, 4),
                    "tpot": None if not (tk and t0 and t0.median) else round(tau.median * tk.median / t0.median, 4),
                    "throughput": None if not (xk and x0 and xk.median) else round(tau.median * x0.median / xk.median, 4),
                })
            per_arm[labels[config]] = rows
        out[prompt_class] = per_arm
    return out
