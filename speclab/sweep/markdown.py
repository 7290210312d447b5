"""``sweep.md``: the release-note section of a sweep.

The grid, the crossover per class (or, where none was reached, the acceptance length at which one
would be), the recommended schedule and why each range has its k, the ready
``--speculative-config``, the Pareto front, the confirmation pass, and the pair and versions the
figures belong to. Rendered from the ``sweep.json`` document alone, so a sweep's note can be
rebuilt from its file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from .cells import ALL
from .grid import CellConfig, Grid
from .plots import PLOT_NAMES
from .result import SweepResult, scale_label, sweep_document


def _fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _load(doc: Mapping[str, Any], value: Any) -> str:
    if value is None:
        return "none in the grid"
    return f"{value:g} req/s" if doc["grid"]["load"][0]["mode"] == "rate" else f"concurrency {value:g}"


def _grid_lines(doc: Mapping[str, Any]) -> list[str]:
    grid = Grid.from_dict(doc["grid"])
    fixed = sorted({c.k for c in grid.configs if c.fixed})
    schedules = [c.arm() for c in grid.configs if not c.fixed]
    mode = "closed loop, concurrency" if grid.mode == "concurrency" else "open loop, requests/s"

    def axis(name: str) -> str:
        values = sorted({str(getattr(c, name)) if getattr(c, name) is not None else "lab" for c in grid.configs})
        return ", ".join(values)

    cells = doc["cells"]
    failed = [c["id"] for c in cells if c["status"] != "ok"]
    return [
        "## Grid", "",
        f"- k: {', '.join(map(str, fixed))} (k = 0 is the baseline)" + (f"; schedules: {'; '.join(schedules)}" if schedules else ""),
        f"- max_num_seqs: {axis('max_num_seqs')} · max_num_batched_tokens: {axis('max_num_batched_tokens')}"
        f" · chunked prefill: {axis('enable_chunked_prefill')}",
        f"- load ladder ({mode}): {', '.join(f'{lv.value:g}' for lv in grid.load)}",
        f"- repeats {grid.repeats} · warm-up {grid.warmup_s:g} s per cell · at least {grid.min_requests} request(s)"
        f" per class per cell · SLOs: {grid.slo.text()}",
        f"- a difference is a win only outside the repeats' range and above {100 * grid.tie_tolerance:g}%; "
        "otherwise a tie",
        f"- cells: {len(cells) - len(failed)} finished, {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else "")
        + ("" if doc.get("complete") else " — **partial: the sweep did not finish**"),
    ]


def _crossover_lines(doc: Mapping[str, Any]) -> list[str]:
    lines = ["", "## Crossovers per class", "",
             "The lowest load at which each k stops beating k = 0 (TPOT p50, output tokens/s).", "",
             "| class | arm | on TPOT | on throughput | last win (TPOT / throughput) |", "|---|---|---|---|---|"]
    detail = doc["crossover_detail"]
    for prompt_class, per_arm in doc["crossover"].items():
        for arm, found in per_arm.items():
            d = detail[prompt_class][arm]
            lines.append(f"| {prompt_class} | {arm} | {_load(doc, found['tpot'])} | {_load(doc, found['throughput'])}"
                         f" | {_fmt(d['tpot']['last_win'])} / {_fmt(d['throughput']['last_win'])} |")
    none = doc.get("no_crossover") or []
    if none:
        lines += ["", "No crossover was reached in the grid for these; the acceptance length at which one would be"
                  " at the top of the ladder (measured τ × TPOT_k / TPOT₀, or τ × thr₀ / thr_k):", ""]
        for row in none:
            lines.append(f"- {row['class']} / {row['arm']} on {row['measure']}: τ = {_fmt(row['acceptance_length'])}"
                         f" measured at {_load(doc, row['top_load'])}; it would stop paying there at τ ≤ "
                         f"{_fmt(row['break_even'])}")
    return lines


def _speedup_lines(doc: Mapping[str, Any]) -> list[str]:
    """Per arm and load level the speed-up over k = 0 (all classes): TPOT p50 ratio / throughput ratio."""
    per_arm = (doc.get("speedup") or {}).get(ALL) or {}
    levels = [lv["value"] for lv in doc["grid"]["load"]]
    if not per_arm:
        return []
    out = ["", "## Speed-up over k = 0 (all classes)", "",
           "TPOT₀ / TPOT_k (p50) and, after the slash, output tokens/s over k = 0's, per load level"
           f" ({'requests/s' if doc['grid']['load'][0]['mode'] == 'rate' else 'concurrency'}; the running batch"
           " k = 0 measured there in brackets).", "",
           "| arm | " + " | ".join(f"{v:g}{_batch(doc, v)}" for v in levels) + " |",
           "|---|" + "---|" * len(levels)]
    for arm, measures in per_arm.items():
        found = {m: {r["load"]: r["speedup"] for r in rows} for m, rows in measures.items()}
        cells = [f"{_fmt(found.get('tpot', {}).get(v), '.2f')} / {_fmt(found.get('throughput', {}).get(v), '.2f')}"
                 for v in levels]
        out.append(f"| {arm} | " + " | ".join(cells) + " |")
    return out


def _batch(doc: Mapping[str, Any], value: float) -> str:
    batches = [c["server"]["running_batch"] for c in doc["cells"] if c["phase"] == "grid" and c["status"] == "ok"
               and c["config"]["k"] == 0 and c["load"]["value"] == value and (c.get("server") or {}).get("running_batch")]
    return f" ({batches[0]})" if batches else ""


def _schedule_lines(doc: Mapping[str, Any]) -> list[str]:
    ev = doc["schedule_evidence"]
    lines = ["", "## Recommended k schedule", ""]
    if not doc["schedule"]:
        return [*lines, "No schedule: no load level could be placed on a measured running batch."]
    lines += [f"`num_speculative_tokens_per_batch_size` chosen on {ev['objective']} for class `{ev['class']}`: at each "
              "measured running batch the best k, the smallest among those tied within noise.", "",
              "| batch sizes | k | from loads (running batch) | why |", "|---|---|---|---|"]
    for rng in ev["ranges"]:
        loads = ", ".join(f"{lv['load']:g} ({lv['running_batch']})" for lv in rng["levels"])
        why = "; ".join(f"at {lv['load']:g}: {lv['why']}" for lv in rng["levels"])
        lines.append(f"| {rng['range'][0]}–{rng['range'][1]} | {rng['k']} | {loads} | {why} |")
    config = doc.get("speculative_config")
    lines += [""]
    if config is None:
        lines.append("No k beat k = 0 beyond noise anywhere on the ladder: serve without speculative decoding.")
    else:
        text = json.dumps(config, separators=(",", ":"))
        lines += ["Ready for `vllm serve` (vLLM 0.33):", "", "```", f"--speculative-config {shlex.quote(text)}", "```"]
    return lines


def _best_lines(doc: Mapping[str, Any]) -> list[str]:
    rows = (doc.get("best_k") or {}).get(ALL) or []
    if not rows:
        return []
    out = ["", "## Best k per load level (all classes)", "", "| load | best k on TPOT | best k on throughput |",
           "|---|---|---|"]
    out += [f"| {r['load']:g} | {_fmt(r['tpot'])} | {_fmt(r['throughput'])} |" for r in rows]
    return out


def _pareto_lines(doc: Mapping[str, Any]) -> list[str]:
    front = ((doc.get("pareto") or {}).get(ALL) or {}).get("front") or []
    out = ["", "## Pareto front (all classes): per-user vs aggregate output tokens/s", ""]
    if not front:
        return [*out, "Not measured."]
    out += ["| arm | load | per user tok/s | aggregate tok/s |", "|---|---|---|---|"]
    out += [f"| {p['arm']} | {p['load']:g} | {p['per_user_tps']:.1f} | {p['aggregate_tps']:.1f} |" for p in front]
    return out


def _confirm_lines(doc: Mapping[str, Any]) -> list[str]:
    c = doc.get("confirmation")
    out = ["", "## Confirmation pass", ""]
    if c is None:
        return [*out, "Not run yet: the schedule has not been checked against the best fixed k and k = 0."]
    arm = CellConfig.from_dict(c["schedule_arm"]).arm()
    if c.get("fixed_arms_from") == "grid":
        out.append(f"Quick pass: only the schedule ran again; k = 0 and k = {c['best_fixed_k']} are the grid's own cells "
                   "(same traffic, same time scale), so their noise is not re-measured.")
    if c["within_noise_everywhere"]:
        out.append(f"The schedule ({arm}) is within noise of, or better than, the better of k = {c['best_fixed_k']} "
                   "and k = 0 at every level, on TPOT and throughput, for every class.")
    else:
        out.append(f"The schedule ({arm}) is **not** within noise of the best fixed arm here:")
        out += [f"- {w['class']} / {w['measure']} at load {w['load']:g}: {_fmt(w['ratio'])}× the k = {w['best_fixed_k']}"
                f" arm ({w['reason']})" for w in c["where_not"]]
    if c.get("unmeasured"):
        out.append(f"{len(c['unmeasured'])} comparison(s) could not be made (a cell failed or fell short of requests).")
    return out


def render_markdown(doc: Mapping[str, Any]) -> str:
    sim = " (SIMULATED: modelled by speclab.sim, not measured on a GPU)" if doc.get("simulated") else ""
    scale = f" · {scale_label(doc)}: figures in modelled time" if scale_label(doc) else ""
    lines = [f"# Draft-length and batch sweep: {doc.get('lab')} × {doc.get('scenario')}{sim}", ""]
    pair = doc.get("pair") or {}
    if pair:
        lines.append("Pair: " + ", ".join(f"{k}={v}" for k, v in sorted(pair.items())))
    versions = doc.get("versions") or {}
    lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted({"speclab": doc.get("speclab_version"),
                                                                          **versions}.items())) + scale)
    lines += ["", *_grid_lines(doc), *_crossover_lines(doc), *_speedup_lines(doc), *_best_lines(doc), *_schedule_lines(doc),
              *_pareto_lines(doc), *_confirm_lines(doc)]
    if doc.get("notes"):
        lines += ["", "## Notes", "", *[f"- {n}" for n in doc["notes"]]]
    lines += ["", "## Plots", "", *[f"![{name}]({name}.png)" for name in PLOT_NAMES], ""]
    return "\n".join(lines)


def sweep_markdown(result: SweepResult, meta: Mapping[str, Any]) -> str:
    return render_markdown(json.loads(json.dumps(sweep_document(result, meta), default=list)))
