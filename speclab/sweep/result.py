"""Every reduction of a sweep in one value, and ``sweep.json`` (schema ``speclab.sweep/1``).

``reduce_sweep`` is what a driver calls after each finished cell (so an interrupted sweep still
writes its partial reductions) and once at the end; ``sweep_document`` renders the result as
the file format pins it — ``cells``, ``crossover``, ``schedule``, ``speculative_config`` — beside the
evidence behind them; ``load_sweep`` reads a sweep directory back for ``--resume``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclab import __version__
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.files import write_text_atomic
from speclab.model.lab import Lab

from .cells import ALL, CellResult
from .confirm import best_fixed_k, confirmation
from .grid import CellConfig, CellPlan, Grid
from .pareto import pareto_by_class
from .reduce import best_k, break_even, comparisons, crossovers, group_cells, primary_group, speedups
from .schedule import Recommendation, recommend_schedule, speculative_config

SWEEP_SCHEMA = "speclab.sweep/1"
SCHEMA_FILE = Path(__file__).with_name("sweep.schema.json")  # the JSON Schema of the pinned keys


@dataclass(frozen=True)
class SweepResult:
    grid: Grid
    cells: list[CellResult]
    crossover: dict[str, Any]
    crossover_detail: dict[str, Any]
    best_k: dict[str, Any]
    break_even: dict[str, Any]
    recommendation: Recommendation
    speculative_config: dict[str, Any] | None
    pareto: dict[str, Any]
    speedup: dict[str, Any]
    best_fixed: CellConfig | None
    confirmation: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    def no_crossover(self) -> list[dict[str, Any]]:
        """Where an arm still beat k = 0 at the top of the ladder: the τ at which it would stop there."""
        out = []
        for prompt_class, per_arm in self.crossover.items():
            for arm, found in per_arm.items():
                rows = self.break_even.get(prompt_class, {}).get(arm) or []
                for measure, value in found.items():
                    if value is not None or not rows:
                        continue
                    top = rows[-1]
                    out.append({"class": prompt_class, "arm": arm, "measure": measure, "top_load": top["load"],
                                "acceptance_length": top["acceptance_length"], "break_even": top[measure]})
        return out


def reduce_sweep(grid: Grid, cells: Iterable[CellResult], *, lab: Lab, objective: str = "throughput",
                 schedule_class: str = ALL, confirm_from_grid: bool = False) -> SweepResult:
    """All reductions over the cells finished so far (grid cells, and confirmation cells if any).
    ``confirm_from_grid``: the confirmation pass runs only the schedule arm (``--quick``), so k = 0 and
    the best fixed k are the grid's own cells, on the same traffic at the same time scale."""
    cells = list(cells)
    groups = group_cells(cells, "grid")
    tol, least = grid.tie_tolerance, grid.min_requests
    table = comparisons(groups, tolerance=tol, min_requests=least)
    pinned, detail = crossovers(table)
    primary = primary_group(groups)
    seqs = (primary[0] if primary else None) or lab.effective(lab.baseline).max_num_seqs
    rec = recommend_schedule(groups, tolerance=tol, min_requests=least, max_num_seqs=seqs, objective=objective,
                             prompt_class=schedule_class)
    fixed = best_fixed_k(groups, objective=objective, prompt_class=schedule_class)
    confirm_groups = group_cells(cells, "confirm")
    if confirm_from_grid:
        confirm_groups = {**groups, **confirm_groups}
    confirmed = None
    schedule_arm = rec.config()
    if confirm_groups and schedule_arm is not None and fixed is not None:
        confirmed = confirmation(confirm_groups, schedule=schedule_arm, best_fixed=fixed, tolerance=tol, min_requests=least)
        confirmed["fixed_arms_from"] = "grid" if confirm_from_grid else "confirm"
    notes = [*grid.notes(lab.effective(lab.baseline).max_num_seqs), *rec.notes]
    failed = [c.plan.id for c in cells if not c.ok]
    for c in cells:
        saturated, span = c.source.get("saturated_intervals") or 0, c.source.get("span_intervals") or 0
        if span and saturated > span / 2:
            notes.append(f"cell {c.plan.id}: the client could not keep up in {saturated} of {span} intervals, "
                         "so its numbers describe the load generator more than the server")
        elif c.ok and c.source.get("report_exit") == int(ExitCode.MEASUREMENT_INVALID):
            notes.append(f"cell {c.plan.id}: its run was judged invalid ({c.source.get('report_reason')}), "
                         "so its numbers describe the host more than the server")
    if failed:
        notes.append(f"{len(failed)} cell(s) failed and are left out of every comparison: {', '.join(failed)}")
    return SweepResult(grid, cells, pinned, detail, best_k(groups, tolerance=tol, min_requests=least),
                       break_even(groups, min_requests=least), rec, speculative_config(lab, rec),
                       pareto_by_class(groups), speedups(groups), fixed, confirmed, notes)


def scale_label(doc: Mapping[str, Any]) -> str:
    """``time scale 4`` or ``time scale 1-21.5 by load level (1: 1, ..., 256: 21.5)``; empty at S = 1 throughout."""
    by_load = doc.get("time_scale_by_load") or {}
    values = sorted(set(by_load.values())) if by_load else [doc.get("time_scale") or 1.0]
    if values == [1.0] or values == [1]:
        return ""
    if len(values) == 1:
        return f"time scale {values[0]:g}"
    return (f"time scale {values[0]:g}-{values[-1]:g} by load level ("
            + ", ".join(f"{load}: {scale:g}" for load, scale in by_load.items()) + ")")


def sweep_document(result: SweepResult, meta: Mapping[str, Any]) -> dict[str, Any]:
    """``sweep.json``: the pinned keys first, then the grid, the evidence and the run's facts.

    ``meta`` comes from the driver: ``lab``, ``scenario``, ``pair``, ``versions``, ``simulated``,
    ``time_scale``, ``engine``, ``complete`` (False while cells remain or after an interrupt)."""
    rec = result.recommendation
    return {
        "schema": SWEEP_SCHEMA,
        "speclab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **{k: meta.get(k) for k in ("lab", "scenario", "engine", "simulated", "time_scale", "time_scale_by_load")},
        "pair": dict(meta.get("pair") or {}),
        "versions": dict(meta.get("versions") or {}),
        "complete": bool(meta.get("complete", False)),
        "cells": [c.as_dict() for c in result.cells],
        "crossover": result.crossover,
        "schedule": rec.schedule,
        "speculative_config": result.speculative_config,
        "grid": result.grid.as_dict(),
        "crossover_detail": result.crossover_detail,
        "speedup": result.speedup,
        "best_k": result.best_k,
        "break_even": result.break_even,
        "no_crossover": result.no_crossover(),
        "schedule_evidence": {"objective": rec.objective, "class": rec.prompt_class,
                              "num_speculative_tokens": rec.num_speculative_tokens, "ranges": rec.evidence},
        "pareto": result.pareto,
        "best_fixed_k": None if result.best_fixed is None else result.best_fixed.k,
        "confirmation": result.confirmation,
        "notes": result.notes,
    }


def write_sweep_json(directory: Path, result: SweepResult, meta: Mapping[str, Any]) -> Path:
    """Write ``sweep.json`` atomically (a Ctrl-C mid-write leaves the previous one whole)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sweep.json"
    write_text_atomic(path, json.dumps(sweep_document(result, meta), indent=2, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def load_sweep(directory: Path) -> tuple[dict[str, Any], Grid, list[CellResult]]:
    """A sweep directory's ``sweep.json`` read back (for ``--resume``); InputError naming what is wrong."""
    path = directory / "sweep.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no sweep to resume here") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable as JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SWEEP_SCHEMA:
        raise InputError(f"{path}: schema is {doc.get('schema') if isinstance(doc, dict) else None!r}, expected {SWEEP_SCHEMA!r}")
    try:
        grid = Grid.from_dict(doc["grid"])
        cells = [CellResult.from_dict(c) for c in doc["cells"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: grid or cells malformed ({type(exc).__name__}: {exc})") from None
    return doc, grid, cells


def remaining(plans: Iterable[CellPlan], done: Iterable[CellResult]) -> list[CellPlan]:
    """The plans not yet finished (``--resume`` skips finished cells; failed cells run again)."""
    finished = {c.plan.id for c in done if c.ok}
    return [p for p in plans if p.id not in finished]
