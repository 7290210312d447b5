"""``release.md``: the release note rendered from ``release.json`` (and the sweep's own section).

Sections follow the release form: the pair, the gates in the checklist's order, the four headline
metrics per class against the baseline, the recommended k schedule (the sweep's ``sweep.md``
embedded one heading level down), the memory and KV-cache table with the topology, and the
rollback drill. A missing input gets its section anyway, saying what is missing and how to make it.

Under a simulator time scale S ≠ 1 the note says so under its title, and each section built from a
scaled input names its scale and marks its times "modelled".
"""

from __future__ import annotations

import json
import re
from typing import Any

IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def _f(value: Any, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}%"


def _scaled(scale: float | None) -> bool:
    return scale is not None and scale != 1.0


def _sweep_scale(s: dict[str, Any]) -> str:
    """The sweep's S: ``4``, or ``1-8 by load level``."""
    values = sorted(set((s.get("time_scale_by_load") or {}).values())) or [s.get("time_scale") or 1.0]
    return f"{values[0]:g}" if len(values) == 1 else f"{values[0]:g}-{values[-1]:g} by load level"


def _time_scales(doc: dict[str, Any]) -> list[str]:
    """Under the title: the inputs' time scales when any is not 1, and a warning when they differ."""
    scales = {kind: v for kind, v in (doc.get("time_scale") or {}).items() if v is not None}
    if not any(_scaled(v) for v in scales.values()):
        return []
    shown = ", ".join(f"{kind} {_sweep_scale(doc['schedule']) if kind == 'sweep' else f'{v:g}'}"
                      for kind, v in scales.items())
    lines = [f"**Time scale** ({shown}): the simulators ran their clock S times slower than wall time; every time, "
             "rate and duration in this note is modelled time, as in the reports it comes from.", ""]
    for warning in doc.get("warnings") or []:
        lines += [f"**Warning**: {warning}.", ""]
    return lines


def _missing(doc: dict[str, Any], kind: str) -> list[str]:
    made = next((m["made_by"] for m in doc["missing"] if m["kind"] == kind), "")
    return [f"**No {kind} report was given**: this section is empty (`{made}` writes one).", ""]


def _pair(doc: dict[str, Any]) -> list[str]:
    p = doc["pair"]
    lines = ["## The pair (released together)", "", "| | model | revision | tokenizer sha256 |", "|---|---|---|---|"]
    for role in ("target", "draft"):
        digest = p.get(f"{role}_tokenizer_sha256")
        source = p.get(f"{role}_tokenizer_source")
        shown = f"`{digest}`" + (f" ({source})" if source else "") if digest else "–"
        lines.append(f"| {role} | {p.get(f'{role}_model') or '–'} | {p.get(f'{role}_revision') or '–'} | {shown} |")
    lines += ["", f"Method: {p.get('method') or '–'}" + (f" · {p['pairing']}" if p.get("pairing") else ""), ""]
    return lines


def _gates(doc: dict[str, Any]) -> list[str]:
    lines = ["## Gates, in the checklist's order", "", "| # | gate | verdict | exit code if failed | summary |",
             "|---|---|---|---|---|"]
    for i, g in enumerate(doc["gates"], 1):
        verdict = {"passed": "PASSED", "failed": "**FAILED**"}.get(g["status"], g["status"])
        lines.append(f"| {i} | {g['stage']} | {verdict} | {g['exit_code']} | {g['summary']} |")
    return [*lines, ""]


def _distribution(dist: list[int]) -> str:
    total = sum(dist)
    return " ".join(f"{j}:{100 * n / total:.0f}%" for j, n in enumerate(dist)) if total else "–"


def _headline(doc: dict[str, Any]) -> list[str]:
    lines = ["## Headline metrics per prompt class, against the baseline", ""]
    h = doc["headline"]
    if h is None:
        return lines + _missing(doc, "accept")
    scale = h.get("time_scale")
    ms = "ms, modelled" if _scaled(scale) else "ms"
    lines += [f"From the accept report's {h['from_stage'] or 'measured'} traffic; e2e is corrected latency "
              f"(from each request's intended send time); baseline `{h['baseline']}` on the same traffic. "
              "Acceptance length counts the bonus token; the distribution is the share of verify steps that "
              "accepted exactly j drafts."
              + (f" Time scale {scale:g}: latencies are modelled time." if _scaled(scale) else ""), "",
              "| variant | class | requests | acceptance length | distribution (j drafts accepted) | rejection rate "
              f"| e2e p50 / p90 / p99 / p99.9 {ms} | baseline e2e p50 / p99 {ms} | p50 / p99 vs baseline "
              "| structured failures | baseline | Δ points |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in h["rows"]:
        e, b, s = r["e2e_ms"], r["baseline_e2e_ms"], r["structured"]
        sfr = f"{_pct(s['failure_rate'])} ({s['failed']}/{s['total']})" if s.get("total") else "–"
        ratios = f"×{_f(r['e2e_p50_ratio'], '.2f')} / ×{_f(r['e2e_p99_ratio'], '.2f')}"
        lines.append(
            f"| {r['label']} | {r['class']} | {r['requests']} | {_f(r['acceptance_length_mean'], '.2f')} "
            f"| {_distribution(r['acceptance_length_distribution'])} | {_pct(r['rejection_rate'])} "
            f"| {' / '.join(_f(e[p]) for p in ('p50_ms', 'p90_ms', 'p99_ms', 'p999_ms'))} "
            f"| {_f(b['p50_ms'])} / {_f(b['p99_ms'])} | {ratios} | {sfr} "
            f"| {_pct(r['baseline_structured_failure_rate'])} | {_f(r['structured_delta_points'], '+.2f')} |")
    return [*lines, ""]


def _demote(markdown: str) -> list[str]:
    """The sweep's section one heading level down, so it nests under the note's own heading."""
    out = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if line.startswith("#") and not fenced else line)
    return out


def _schedule(doc: dict[str, Any], sweep_md: str | None) -> list[str]:
    lines = ["## Recommended k schedule and crossovers", ""]
    s = doc["schedule"]
    if s is None:
        return lines + _missing(doc, "sweep")
    if _scaled(s.get("time_scale")):
        lines += [f"Sweep at time scale {_sweep_scale(s)}: its latencies, rates and throughputs are modelled time.", ""]
    ranges = s.get("schedule") or []
    if ranges:
        lines += ["| running batch | k |", "|---|---|"]
        lines += [f"| {lo}–{hi} | {k} |" for lo, hi, k in ranges]
        lines.append("")
    else:
        lines += ["No schedule: the sweep recommended none (see its notes).", ""]
    if s.get("speculative_config"):
        lines += ["```", f"--speculative-config '{json.dumps(s['speculative_config'], separators=(',', ':'))}'", "```", ""]
    cross = s.get("crossover") or {}
    if cross:
        lines += ["| class | arm | no longer beats k = 0 on TPOT at | on throughput at |", "|---|---|---|---|"]
        for cls, arms in cross.items():
            for arm, found in arms.items():
                lines.append(f"| {cls} | {arm} | {_f(found.get('tpot'), 'g')} | {_f(found.get('throughput'), 'g')} |")
        lines += ["", "(load levels of the sweep's ladder; – where the arm still won at the top of it)", ""]
    if not s.get("complete"):
        lines += ["**The sweep did not finish**: the schedule covers the cells it measured.", ""]
    if sweep_md:
        lines += [*_demote(sweep_md), ""]
    return lines


def _memory(doc: dict[str, Any]) -> list[str]:
    lines = ["## Memory and KV cache against the baseline, and topology", ""]
    m = doc["memory"]
    if m is None:
        return [*lines, "**No memory table**: neither the accept nor the drill report carries one.", ""]
    rows = m["rows"]
    lines += ["| server | weights GiB | Δ vs baseline GiB | KV-cache tokens | × baseline | max concurrency | × baseline "
              "| KV usage mean / peak |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        usage = f"{_pct(r.get('kv_usage_mean'))} / {_pct(r.get('kv_usage_peak'))}"
        lines.append(f"| {r['variant']}{' (the baseline)' if r.get('baseline') else ''} | {_f(r.get('weights_gib'), '.2f')} "
                     f"| {_f(r.get('weights_gib_vs_baseline'), '+.2f')} | {_f(r.get('kv_cache_tokens'), ',.0f')} "
                     f"| {_f(r.get('kv_cache_tokens_vs_baseline'), '.3f')} | {_f(r.get('max_concurrency'), '.1f')} "
                     f"| {_f(r.get('max_concurrency_vs_baseline'), '.3f')} | {usage} |")
    lines.append("")
    for g in m.get("gpu_memory") or []:
        lines.append(f"- GPU {g.get('gpu')} {g.get('name')}: peak {g.get('peak_used_gib')} of {g.get('total_gib')} GiB")
    t = m["topology"]
    between = {"shared": "servers shared GPUs", "separate": "each server on its own GPUs",
               None: "GPU placement not recorded"}[t["between_servers"]]
    placed = ", ".join(f"{name} {s['gpus']} (tp {s['tensor_parallel_size']})" for name, s in t["servers"].items()
                       if s["gpus"] is not None)
    lines += [f"Topology: draft and target on the {t['draft_and_target']}; {between}" + (f": {placed}" if placed else "")
              + f". (From the {m['from']} report.)", ""]
    return lines


def _drill(doc: dict[str, Any]) -> list[str]:
    lines = ["## Rollback drill", ""]
    d = doc["drill"]
    if d is None:
        return lines + _missing(doc, "drill")
    scaled = _scaled(d.get("time_scale"))
    lines += [f"Verdict: **{d['verdict'].upper()}** ({d.get('lab') or '–'} × {d.get('scenario') or '–'})", ""]
    if scaled:
        lines += [f"Time scale {d['time_scale']:g}: the drill's seconds and latencies are modelled time.", ""]
    unit = "s, modelled" if scaled else "s"
    lines += [f"| rollback {unit} (command → last request routed to a speculative backend) | drain {unit} (→ last in-flight "
              "speculative response finished) | in flight at the flip | failed during the flip | converged |",
              "|---|---|---|---|---|",
              f"| {_f(d.get('rollback_s'), '.3f')} | {_f(d.get('drain_s'), '.3f')} | {d.get('in_flight_at_flip')} "
              f"| {d.get('failed_during_flip')} | {d.get('converged')} |", ""]
    if d.get("limit_s") is not None:
        lines += [f"Rollback limit {d['limit_s']:g} s" + (f", rolled back by {d['rollback_by']}" if d.get("rollback_by")
                                                          else "") + ".", ""]
    return lines + _tenants(d.get("tenants") or {}, scaled)


def _tenants(tenants: dict[str, Any], scaled: bool = False) -> list[str]:
    """Per tenant: each phase of the drill as a row where the drill reports phases, else its scalar facts."""
    lines: list[str] = []
    phased = {n: f for n, f in tenants.items() if isinstance(f, dict) and isinstance(f.get("phases"), dict)}
    if phased:
        ms = "ms, modelled" if scaled else "ms"
        lines += [f"| tenant | role | phase | pool | served by | requests | errors | e2e p50 / p99 {ms} | rejection rate "
                  "| structured failures |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, facts in phased.items():
            for phase, p in facts["phases"].items():
                served = ", ".join(f"{b} {n}" for b, n in (p.get("backends") or {}).items()) or "–"
                lines.append(f"| {name} | {facts.get('role') or '–'} | {phase} | {p.get('pool') or '–'} | {served} "
                             f"| {p.get('requests')} | {p.get('errors')} | {_f(p.get('e2e_p50_ms'))} / "
                             f"{_f(p.get('e2e_p99_ms'))} | {_pct(p.get('rejection_rate'))} "
                             f"| {_pct(p.get('structured_failure_rate'))} |")
        lines.append("")
    for name, facts in tenants.items():
        if name in phased:
            continue
        if isinstance(facts, dict):
            shown = ", ".join(f"{k}={v}" for k, v in facts.items() if not isinstance(v, (dict, list)))
        else:
            shown = str(facts)
        lines.append(f"- tenant {name}: {shown}")
    return [*lines, ""] if lines and lines[-1] else lines


def render_release(doc: dict[str, Any], sweep_md: str | None = None) -> str:
    p = doc["pair"]
    sim = " (SIMULATED: figures modelled by speclab.sim, not measured on a GPU)" if doc["simulated"] else ""
    title = (f"# Release note: {p.get('target_model') or '?'}@{p.get('target_revision') or '?'} with "
             f"{p.get('draft_model') or '?'}@{p.get('draft_revision') or '?'}{sim}")
    lines = [title, "", *_time_scales(doc), f"Verdict: **{doc['verdict']}**", ""]
    lines += [f"- {kind} report: {path or '**missing**'}" for kind, path in doc["inputs"].items()]
    lines.append("")
    for part in (_pair(doc), _gates(doc), _headline(doc), _schedule(doc, sweep_md), _memory(doc), _drill(doc)):
        lines += part
    return "\n".join(lines).rstrip() + "\n"


def images(markdown: str) -> list[str]:
    """Relative image paths the note refers to (the sweep's plots), to copy beside it."""
    return [m.group(1) for m in IMAGE.finditer(markdown) if "://" not in m.group(1) and not m.group(1).startswith("/")]
