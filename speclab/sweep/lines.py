"""The plain lines both sweep front ends print: the progress line and one line per finished cell."""

from __future__ import annotations

from speclab.model.exit_codes import ExitCode

from .cells import CellResult
from .grid import CellPlan
from .result import SweepResult


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    whole = round(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def progress_line(done: int, failed: int, total: int, eta_s: float | None, plan: CellPlan | None) -> str:
    """E.g. ``[sweep] 3/18 cells done (0 failed) · ETA 2m10s · now k2_c8_r1 (grid)``."""
    current = f" · now {plan.id} ({plan.phase})" if plan is not None else ""
    return f"[sweep] {done}/{total} cells done ({failed} failed) · ETA {duration_text(eta_s)}{current}"


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def clock_text(cell: CellResult) -> str:
    """`` · S=3, clock ok (drift p99 0.4 ms, step 11.2 ms)``: the cell's scale and its simulator's clock."""
    scale = cell.source.get("time_scale")
    text = "" if scale is None else f" · S={scale:g}"
    clock = cell.source.get("sim_clock")
    invalid = cell.source.get("report_exit") == int(ExitCode.MEASUREMENT_INVALID)
    behind = invalid and str(cell.source.get("report_reason") or "").startswith("the simulator")
    if isinstance(clock, dict) and clock.get("intervals"):
        trailing = len(clock.get("trailing_intervals") or ())
        verdict = "SIM BEHIND" if behind else "clock ok" if not trailing else f"clock flagged {trailing}/{clock['intervals']}"
        text += (f", {verdict} (drift p99 {_fmt(clock.get('drift_p99_ms'), '.1f')} ms, "
                 f"step {_fmt(clock.get('step_mean_ms'), '.1f')} ms)")
    if invalid and not behind:
        text += ", CLIENT FLAGGED"
    return text


def cell_line(cell: CellResult, done: int, total: int, result: SweepResult, elapsed_s: float) -> str:
    """E.g. ``cell 3/18 k2_c8_r1 ok in 12 s: 412 req, TPOT p50 9.1 ms, 1530 tok/s, AL 2.41, batch 7.6;
    vs k0: tpot ×1.31, throughput ×1.12``."""
    head = f"cell {done}/{total} {cell.plan.id}"
    if not cell.ok:
        return f"{head} FAILED in {elapsed_s:.0f} s: {cell.error}"
    batch = None if cell.server is None else cell.server.running_mean
    text = (f"{head} ok in {elapsed_s:.0f} s: {cell.requests('all')} req, "
            f"TPOT p50 {_fmt(cell.value('all', 'tpot'), '.1f')} ms, "
            f"{_fmt(cell.value('all', 'throughput'), '.0f')} tok/s, "
            f"AL {_fmt(cell.value('all', 'acceptance_length'), '.2f')}, batch {_fmt(batch, '.1f')}")
    text += clock_text(cell)
    if cell.config.speculative and cell.plan.phase == "grid":
        found = (result.speedup.get("all") or {}).get(cell.config.arm(result.grid.varying())) or {}
        parts = []
        for measure in ("tpot", "throughput"):
            row = next((r for r in found.get(measure) or () if r["load"] == cell.load.value), None)
            if row is not None:
                parts.append(f"{measure} ×{row['speedup']:.2f}")
        if parts:
            text += f"; vs k0: {', '.join(parts)}"
    return text


def crossover_lines(result: SweepResult) -> list[str]:
    """The crossover per class and arm; where none was reached, the acceptance length at which the
    top of the ladder would be one (the measured break-even, τ × TPOT_k / TPOT₀)."""
    short = {(r["class"], r["arm"], r["measure"]): r for r in result.no_crossover()}
    lines = []
    for prompt_class, per_arm in result.crossover.items():
        for arm, found in per_arm.items():
            parts = []
            for measure, value in found.items():
                if value is not None:
                    parts.append(f"{measure} at {value:g}")
                    continue
                why = short.get((prompt_class, arm, measure))
                if why is None or why.get("break_even") is None:
                    parts.append(f"{measure} none in the grid")
                else:
                    parts.append(f"{measure} none in the grid (at load {why['top_load']:g} it stops paying only if the acceptance "
                                 f"length falls to {why['break_even']:.2f}; measured {why['acceptance_length']:.2f})")
            lines.append(f"crossover {prompt_class} {arm}: {', '.join(parts)}")
    return lines
