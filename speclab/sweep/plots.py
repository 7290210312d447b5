"""The sweep's plots as PNG and SVG: speed-up against load per k and class, the acceptance-length
distribution per k, and the Pareto front of per-user against aggregate throughput.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch, no
display needed) and written deterministically: a fixed SVG hash salt, no dates in the metadata,
sorted inputs, so the same sweep writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .cells import ALL
from .reduce import Groups, arm_labels, classes_of, configs_of, group_cells, levels_of
from .result import SweepResult, scale_label

PLOT_NAMES = ("speedup_vs_load", "acceptance_length", "pareto")
_RC: dict[str, Any] = {"svg.hashsalt": "speclab-sweep", "svg.fonttype": "path", "font.size": 9.0, "axes.grid": True,
       "grid.alpha": 0.3, "figure.dpi": 100.0}


def _save(fig: Figure, directory: Path, name: str) -> list[Path]:
    FigureCanvasAgg(fig)
    paths = [directory / f"{name}.png", directory / f"{name}.svg"]
    fig.savefig(paths[0], format="png", metadata={"Software": None})
    fig.savefig(paths[1], format="svg", metadata={"Date": None, "Creator": None})
    return paths


def _title(fig: Figure, what: str, meta: dict[str, Any]) -> None:
    facts = [f"lab {meta.get('lab') or '?'}", f"scenario {meta.get('scenario') or '?'}"]
    if meta.get("simulated"):
        facts.append("SIMULATED")
    if scale_label(meta):
        facts.append(f"{scale_label(meta).split(' (')[0]} (modelled time)")
    fig.suptitle(f"{what}\n{' · '.join(facts)}", fontsize=9)


def speedup_figure(result: SweepResult, levels: Sequence[float], meta: dict[str, Any]) -> Figure:
    """Rows: TPOT speed-up (TPOT₀ / TPOT_k) and throughput speed-up; one column per class."""
    classes = list(result.speedup) or [ALL]
    fig = Figure(figsize=(3.2 * len(classes) + 1.0, 6.0), layout="constrained")
    axes = fig.subplots(2, len(classes), squeeze=False, sharex=True)
    for col, prompt_class in enumerate(classes):
        for row, (measure, name) in enumerate((("tpot", "TPOT speed-up"), ("throughput", "throughput speed-up"))):
            ax = axes[row][col]
            ax.axhline(1.0, color="0.3", linewidth=0.8)
            for arm, per_measure in (result.speedup.get(prompt_class) or {}).items():
                points = per_measure[measure]
                if points:
                    ys = [p["speedup"] for p in points]
                    ax.errorbar([p["load"] for p in points], ys,
                                yerr=[[y - p["low"] for y, p in zip(ys, points, strict=True)],
                                      [p["high"] - y for y, p in zip(ys, points, strict=True)]],
                                marker="o", markersize=3.5, capsize=2, label=arm)
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(levels), [f"{t:g}" for t in levels])
            ax.minorticks_off()
            ax.set_title(f"{prompt_class}: {name}" if row == 0 else name, fontsize=9)
            if col == 0:
                ax.set_ylabel("× vs k=0")
            if row == 1:
                ax.set_xlabel("concurrency" if result.grid.mode == "concurrency" else "requests/s")
    handles, names = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize=8)
    _title(fig, "speed-up vs k=0 against load (bars: the repeats' range)", meta)
    return fig


def acceptance_figure(groups: Groups, meta: dict[str, Any]) -> Figure:
    """One panel per speculative arm: share of verify steps that accepted exactly j drafts, per class."""
    labels = arm_labels(groups)
    arms = [c for c in configs_of(groups) if c.speculative]
    classes = classes_of(groups) or [ALL]
    fig = Figure(figsize=(max(4.0, 3.4 * max(len(arms), 1)), 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(arms), 1), squeeze=False)[0]
    for ax, config in zip(axes, arms, strict=False):
        width = 0.8 / len(classes)
        for i, prompt_class in enumerate(classes):
            counts: list[int] = []
            for (c, _), group in groups.items():
                if c != config:
                    continue
                for cell in group.ok:
                    dist = ((cell.classes.get(prompt_class) or {}).get("acceptance") or {}).get(
                        "acceptance_length_distribution") or []
                    counts += [0] * (len(dist) - len(counts))
                    for j, n in enumerate(dist):
                        counts[j] += int(n)
            total = sum(counts)
            if total:
                ax.bar([j + (i - (len(classes) - 1) / 2) * width for j in range(len(counts))],
                       [n / total for n in counts], width=width, label=prompt_class)
        ax.set_title(labels[config], fontsize=9)
        ax.set_xticks(range(config.k + 1))
    axes[0].set_ylabel("share of verify steps")
    fig.supxlabel("drafts accepted in a step (acceptance length − 1)", fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize=8)
    _title(fig, "acceptance-length distribution per k (all load levels)", meta)
    return fig


def pareto_figure(result: SweepResult, meta: dict[str, Any], prompt_class: str = ALL) -> Figure:
    data = result.pareto.get(prompt_class) or {"arms": {}, "front": []}
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.subplots()
    for arm, curve in data["arms"].items():
        if curve:
            ax.plot([p["aggregate_tps"] for p in curve], [p["per_user_tps"] for p in curve], marker="o",
                    markersize=3.5, label=arm)
            for p in curve:
                ax.annotate(f"{p['load']:g}", (p["aggregate_tps"], p["per_user_tps"]), fontsize=6,
                            textcoords="offset points", xytext=(3, 3))
    front = data["front"]
    if front:
        ax.plot([p["aggregate_tps"] for p in front], [p["per_user_tps"] for p in front], color="black",
                linestyle="--", linewidth=1.0, label="Pareto front")
    ax.set_xlabel("aggregate output tokens/s")
    ax.set_ylabel("output tokens/s per user (1000 / TPOT p50)")
    ax.legend(fontsize=8)
    _title(fig, f"per-user vs aggregate throughput, class {prompt_class} (point labels: load)", meta)
    return fig


def write_plots(directory: Path, result: SweepResult, meta: dict[str, Any],
                names: Sequence[str] = PLOT_NAMES) -> list[Path]:
    """Every plot as ``NAME.png`` and ``NAME.svg`` at the top of ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    groups = group_cells(result.cells, "grid")
    makers = {"speedup_vs_load": lambda: speedup_figure(result, [lv.value for lv in levels_of(groups)], meta),
              "acceptance_length": lambda: acceptance_figure(groups, meta),
              "pareto": lambda: pareto_figure(result, meta)}
    paths: list[Path] = []
    with matplotlib.rc_context(_RC):  # type: ignore[arg-type]
        for name in names:
            paths += _save(makers[name](), directory, name)
    return paths
