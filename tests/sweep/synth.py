"""Synthetic sweep cells with a known answer, built through the same path real cells take.

Each cell is a per-epoch report block (the shape ``report.json`` writes for
``variants.<name>.epochs[i]``) plus server samples, fed to ``cell_from_epoch``. The figures come
from a small step model whose crossovers are known in closed form: a plain step costs t0(b), a
step with k drafts costs t0(b)·(1 + A·k·b); with acceptance length τ the speed-up is
τ / (1 + A·k·b), which falls to 1 at b* = (τ − 1) / (A·k).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speclab.model.records import ServerSample
from speclab.sweep import CellPlan, CellResult, Grid, Slo, cell_from_epoch

A = 0.02
TAU = {2: 1.9, 4: 2.2}  # acceptance length per k: k4's crossover b* = 15, k2's b* = 22.5
CLASSES = ("qa", "code")
DURATION_S = 30.0


def t0_ms(batch: float) -> float:
    return 10.0 + 0.05 * batch


def step_ms(k: int, batch: float) -> float:
    return t0_ms(batch) * (1.0 + A * k * batch)


def class_block(tpot_ms: float, tokens_per_s: float, *, requests: int = 60, k: int = 0, tau: float | None = None,
                ttft_ms: float = 40.0, structured: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """A report.json class block (as reports/build.py ``class_dict`` writes it)."""
    def pct(p50: float) -> dict[str, Any]:
        return {"count": requests, "mean_ms": p50, "p50_ms": p50, "p90_ms": p50 * 1.2, "p99_ms": p50 * 1.5,
                "p999_ms": p50 * 1.6, "max_ms": p50 * 1.7}
    hist = [0] * (k + 1)
    steps = 0
    if k and tau is not None:
        steps = 1000
        accepted = round((tau - 1.0) * steps)
        full, rest = divmod(accepted, k)
        hist[k] = full
        hist[0] = steps - full - (1 if rest else 0)
        if rest:
            hist[rest] += 1
    drafted = steps * k
    accepted_total = sum(j * n for j, n in enumerate(hist))
    return {
        "requests": requests, "errors": {}, "output_tokens": int(tokens_per_s * DURATION_S),
        "throughput": {"requests_per_s": requests / DURATION_S, "output_tokens_per_s": tokens_per_s},
        "latency": {"ttft_corrected": pct(ttft_ms), "tpot": pct(tpot_ms), "e2e_corrected": pct(ttft_ms + 40 * tpot_ms)},
        "timing_source": "per_request",
        "acceptance": {
            "source": "exact" if k else "none", "requests": requests if k else 0, "steps": steps, "drafted": drafted,
            "accepted": accepted_total, "acceptance_length_mean": (1 + accepted_total / steps) if steps else None,
            "acceptance_length_distribution": hist if k else [],
            "acceptance_rate": accepted_total / drafted if drafted else None,
            "rejection_rate": 1 - accepted_total / drafted if drafted else None,
            "verifications_per_request": steps / requests if steps else None,
            "per_position": [], "per_position_drafts": [], "per_position_source": "none"},
        "structured": {"total": structured[0], "failed": structured[1],
                       "failure_rate": structured[1] / structured[0] if structured[0] else None},
        "window_s": DURATION_S,
    }


def samples(variant: str, batch: float, start: float, end: float) -> list[ServerSample]:
    """A scrape a second; the first two idle (running 0), as a server looks before its first batch."""
    out = []
    t = start
    i = 0
    while t <= end:
        running = 0.0 if i < 2 else batch
        out.append(ServerSample(t=t, variant=variant, running=running, waiting=0.0, kv_usage=0.01 * batch,
                                preemptions=0.0))
        t += 1.0
        i += 1
    return out


def model_cell(plan: CellPlan, slo: Slo, *, jitter: float = 1.0, batch: float | None = None,
               tau: dict[int, float] | None = None) -> CellResult:
    """The cell the step model predicts for ``plan`` (running batch = concurrency unless given)."""
    config, level = plan.config, plan.load
    b = level.value if batch is None else batch
    k = config.k
    taus = TAU if tau is None else tau
    tau_k = taus.get(k) if k else None
    tpot = step_ms(k, b) / (tau_k or 1.0) * jitter
    tps = b * 1000.0 / tpot
    classes = {name: class_block(tpot, tps / len(CLASSES), k=k, tau=tau_k) for name in CLASSES}
    classes["all"] = class_block(tpot, tps, requests=120, k=k, tau=tau_k)
    variant = f"k{k}"
    start = 100.0 * plan.repeat
    block = {"epoch": 1, "label": variant, "settings": config.settings(), "start_s": start,
             "end_s": start + DURATION_S, "accounting": {"completed": 120, "errored": 0}, "classes": classes}
    return cell_from_epoch(plan, block, variant=variant, slo=slo, samples=samples(variant, b, start, start + DURATION_S))


JITTER = (0.996, 1.0, 1.004)


def model_cells(grid: Grid, plans: Sequence[CellPlan] | None = None) -> list[CellResult]:
    return [model_cell(p, grid.slo, jitter=JITTER[(p.repeat - 1) % len(JITTER)]) for p in plans or grid.cells()]
