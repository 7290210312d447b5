"""The run report: a versioned JSON document and its Markdown rendering.

Both are built from the final ``Snapshot`` (the same stream the UI shows), so a report recomputed
from a recording equals the live one.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speclab import __version__
from speclab.model.ab_rows import ab_rows, change_text
from speclab.model.epochs import EpochInfo
from speclab.model.errors import InputError
from speclab.model.names import Metric
from speclab.model.records import Event
from speclab.model.snapshot import (
    ALL_CLASSES,
    ABView,
    ABWindow,
    ClassStats,
    EpochStats,
    Percentiles,
    Snapshot,
    SplitRow,
)
from speclab.session.api import ServerView, SessionInfo

REPORT_SCHEMA = "speclab.report/1"

def _ms(value: float | None) -> float | None:
    return None if value is None else round(value / 1000.0, 3)


def percentiles_dict(p: Percentiles) -> dict[str, Any]:
    return {
        "count": p.count,
        "mean_ms": _ms(p.mean) if p.count else None,
        "p50_ms": _ms(p.p50),
        "p90_ms": _ms(p.p90),
        "p99_ms": _ms(p.p99),
        "p999_ms": _ms(p.p999),
        "max_ms": _ms(p.max),
    }


SPLIT_PARTS = ("schedule_lag", "server_queue", "server_prefill", "server_decode", "client_transport")


def split_dict(row: SplitRow | None) -> dict[str, Any] | None:
    """One composition in ms: the parts and the remainder add up to ``e2e_corrected_ms``."""
    if row is None:
        return None
    parts = dict(zip(SPLIT_PARTS, (_ms(v) for v in row.parts), strict=True))
    return {"requests": row.requests, "timed": row.timed, **{f"{k}_ms": v for k, v in parts.items()},
            "e2e_corrected_ms": _ms(row.e2e_corrected)}


def class_dict(stats: ClassStats) -> dict[str, Any]:
    acc = stats.acceptance
    return {
        "requests": stats.requests,
        "errors": dict(stats.errors),
        "output_tokens": stats.output_tokens,
        "throughput": {
            "requests_per_s": round(stats.requests_per_s, 3),
            "output_tokens_per_s": round(stats.output_tokens_per_s, 1),
        },
        "latency": {name: percentiles_dict(p) for name, p in stats.latency.items()},
        "timing_source": stats.timing_source,
        "split": {"p50": split_dict(stats.split_p50), "tail": split_dict(stats.split_tail)},
        "acceptance": {
            "source": acc.source,
            "requests": acc.requests,
            "steps": acc.steps,
            "drafted": acc.drafted,
            "accepted": acc.accepted,
            "acceptance_length_mean": acc.acceptance_length,
            "acceptance_length_distribution": list(acc.histogram),
            "acceptance_rate": acc.acceptance_rate,
            "rejection_rate": acc.rejection_rate,
            "verifications_per_request": acc.verifications_per_request,
            "per_position": list(acc.per_position),
            "per_position_drafts": list(acc.position_drafts),
            "per_position_source": acc.position_source,
            "per_k": [{"k": k, "steps": steps, "acceptance_length": length} for k, steps, length in acc.k_rows],
        },
        "structured": {
            "total": stats.structured_total,
            "failed": stats.structured_failed,
            "failure_rate": stats.structured_failure_rate,
        },
        "window_s": stats.window_s,
    }


def epoch_dict(epoch: EpochStats, view: ServerView | None, end_s: float) -> dict[str, Any]:
    """One config epoch of a variant: what it ran with, when, and everything measured in it."""
    info = epoch.info
    return {
        "epoch": info.epoch,
        "label": info.label or info.variant,
        "settings": dict(info.settings) if info.settings or view is None or info.epoch > 1 else dict(view.settings),
        "start_s": round(info.start_s, 3),
        "end_s": round(end_s if info.end_s is None else info.end_s, 3),
        "accounting": epoch.accounting.as_dict(),
        "classes": {cls: class_dict(stats) for cls, stats in epoch.stats.classes.items()},
    }


def _ab_side(window: ABWindow) -> dict[str, Any]:
    return {
        "epoch": window.epoch, "label": window.label, "baseline_epoch": window.baseline_epoch,
        "intervals": window.intervals, "first_interval": window.first_interval, "last_interval": window.last_interval,
        "start_s": round(window.start_s, 3), "end_s": round(window.end_s, 3), "note": window.note,
        "own": {cls: class_dict(stats) for cls, stats in window.own.classes.items()},
        "baseline": {cls: class_dict(stats) for cls, stats in window.baseline.classes.items()},
    }


def ab_rows_all(view: ABView) -> list[dict[str, Any]]:
    """The A/B table over all classes (times in ms): each side's value and the two changes."""
    out: list[dict[str, Any]] = []
    prev = view.previous
    for row in ab_rows(corrected=True):
        scale = 1000.0 if row.kind == "time" else 1.0
        values = {
            "previous": row.value(prev.own.total) if prev else None,
            "previous_baseline": row.value(prev.baseline.total) if prev else None,
            "current": row.value(view.current.own.total),
            "current_baseline": row.value(view.current.baseline.total),
        }
        out.append({
            "key": row.key, "metric": row.label + (" ms" if row.kind == "time" else ""), "kind": row.kind,
            **{k: None if v is None else round(v / scale, 4) for k, v in values.items()},
            "vs_previous": change_text(row.kind, values["current"], values["previous"], "–"),
            "vs_baseline": change_text(row.kind, values["current"], values["current_baseline"], "–"),
        })
    return out


def ab_dict(view: ABView) -> dict[str, Any]:
    """The final A/B of one variant: current and previous epoch, each beside the baseline's same intervals."""
    return {"baseline": view.baseline, "current": _ab_side(view.current),
            "previous": _ab_side(view.previous) if view.previous is not None else None,
            "rows": ab_rows_all(view)}


def host_facts() -> dict[str, Any]:
    import os

    return {
        "hostname": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def build_report(
    info: SessionInfo,
    final: Snapshot,
    *,
    servers: dict[str, ServerView],
    command: str = "run",
    extra: dict[str, Any] | None = None,
    events: Sequence[Event] | None = None,
    timeline: list[dict[str, Any]] | None = None,
    incomplete: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON report of one run; ``extra`` adds sections (gates, memory, crosscheck, exit).

    ``events`` are the whole run's (a consumer of the stream collects them; by default the final
    snapshot's, which holds them all when it is the stream's only snapshot, as in a replay);
    ``timeline`` the per-interval rows (``headless.progress.timeline_rows``); ``incomplete`` what
    the traffic side lost (dead workers, dropped record batches)."""
    variants: dict[str, Any] = {}
    for name, vstats in final.cumulative.items():
        view = servers.get(name)
        variants[name] = {
            "baseline": bool(view and view.baseline),
            "server": {
                "engine": view.engine if view else None,
                "command": view.command if view else None,
                "settings": dict(view.settings) if view else {},
                "memory": dict(view.memory) if view else {},
            },
            "epochs": [epoch_dict(e, view, final.t) for e in final.epochs.get(name, ())]
            or [epoch_dict(EpochStats(_first_epoch(name), vstats), view, final.t)],
        }
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "speclab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
        "simulated": info.simulated,
        "lab": info.lab,
        "scenario": info.scenario,
        "pair": dict(info.pair),
        "arrival": dict(info.arrival),
        "replay": info.replay,
        "duration_s": round(final.t, 3),
        "classes": list(info.classes),
        "measurement": {
            "saturated_intervals": list(final.saturated_intervals),
            "incomplete": list(incomplete),
            "client": {  # the worst interval of the run
                "schedule_lag_p99_ms": final.run_health.schedule_lag_p99_ms,
                "loop_lag_max_ms": final.run_health.loop_lag_max_ms,
                "cpu_percent": final.run_health.cpu_percent,
            },
        },
        "variants": variants,
        "transitions": [t.as_dict() for t in final.transitions],
        "ab": {name: ab_dict(view) for name, view in final.ab.items()},
        "events": [e.to_dict() for e in (final.events if events is None else events)],
        "host": host_facts(),
    }
    if timeline is not None:
        report["timeline"] = timeline
    if extra:
        report.update(extra)
    return report


def _first_epoch(variant: str) -> EpochInfo:
    return EpochInfo(variant, 1, variant)


def epoch_rows(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, epoch block) for every epoch of every variant, in report order."""
    return [(e.get("label") or name, e) for name, v in report["variants"].items() for e in v.get("epochs", [])]


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}%"


def render_markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    sim = " (SIMULATED: numbers are modelled by speclab.sim, not measured on a GPU)" if report["simulated"] else ""
    lines.append(f"# speclab {report['command']}: {report['lab']} × {report['scenario']}{sim}")
    lines.append("")
    pair = report.get("pair") or {}
    if pair:
        lines.append("Pair: " + ", ".join(f"{k}={v}" for k, v in sorted(pair.items())))
    lines.append(f"Duration {report['duration_s']:.1f} s · arrival {json.dumps(report.get('arrival', {}))}")
    sat = report["measurement"]["saturated_intervals"]
    if sat:
        lines.append(
            f"**Client could not keep up in {len(sat)} interval(s)** ({', '.join(map(str, sat[:20]))}): "
            "numbers from those intervals describe the client, not the server."
        )
    if "exit" in report:
        lines.append(f"Exit: {report['exit']['code']} {report['exit']['reason']}")
    lines += _epochs_markdown(report)
    lines += _accounting_markdown(report)
    lines.append("")
    lines.append("## Headline metrics (corrected latency, per class and variant)")
    lines.append("")
    lines.append(
        "| variant | class | requests | errors | acceptance length | rejection rate | verifications/req"
        " | e2e p50 ms | e2e p99 ms | e2e p99.9 ms | structured failures | source |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for vname, v in epoch_rows(report):
        for cname, c in v["classes"].items():
            acc = c["acceptance"]
            e2e = c["latency"].get(Metric.E2E_CORRECTED.value, {})
            errors = sum(c["errors"].values())
            structured = c["structured"]
            sfr = _pct(structured["failure_rate"]) + (f" ({structured['failed']}/{structured['total']})" if structured["total"] else "")
            lines.append(
                f"| {vname} | {cname} | {c['requests']} | {errors} | {_fmt(acc['acceptance_length_mean'], '.2f')}"
                f" | {_pct(acc['rejection_rate'])} | {_fmt(acc['verifications_per_request'], '.1f')}"
                f" | {_fmt(e2e.get('p50_ms'))} | {_fmt(e2e.get('p99_ms'))} | {_fmt(e2e.get('p999_ms'))}"
                f" | {sfr} | {acc['source']} |"
            )
    lines.append("")
    lines.append("## Acceptance-length distribution (steps accepting exactly j drafts)")
    lines.append("")
    for vname, v in epoch_rows(report):
        for cname, c in v["classes"].items():
            dist = c["acceptance"]["acceptance_length_distribution"]
            if dist and sum(dist):
                total = sum(dist)
                parts = " ".join(f"{j}:{100 * n / total:.0f}%" for j, n in enumerate(dist))
                lines.append(f"- {vname} / {cname}: {parts}")
    per_k = [(vname, cname, c["acceptance"].get("per_k") or []) for vname, v in epoch_rows(report)
             for cname, c in v["classes"].items()]
    if any(rows for _, _, rows in per_k):
        lines.append("")
        lines.append("## Acceptance per k used (drafts a verify step checked: acceptance length, steps)")
        lines.append("")
        for vname, cname, rows in per_k:
            if rows:
                parts = " · ".join(f"k={r['k']}: {_fmt(r['acceptance_length'], '.2f')} ({r['steps']})" for r in rows)
                lines.append(f"- {vname} / {cname}: {parts}")
    lines.append("")
    lines += _split_markdown(report)
    lines.append("")
    lines.append("## Throughput and errors")
    lines.append("")
    lines.append("| variant | requests/s | output tokens/s | errors by kind |")
    lines.append("|---|---|---|---|")
    for vname, v in epoch_rows(report):
        c = v["classes"].get(ALL_CLASSES)
        if c is None:
            continue
        errs = ", ".join(f"{k}={n}" for k, n in sorted(c["errors"].items())) or "none"
        lines.append(
            f"| {vname} | {c['throughput']['requests_per_s']:.2f} | {c['throughput']['output_tokens_per_s']:.1f} | {errs} |"
        )
    for key, title in (("memory", "Memory and KV cache (per server, against the baseline)"),
                       ("gpu_memory", "GPU memory (NVML, peak during the run)")):
        rows = report.get(key)
        if rows:
            lines += ["", f"## {title}", ""]
            lines += _table(rows)
    timeline = report.get("timeline") or []
    if timeline:
        lines += ["", "## Per interval (1 s): where the spikes were", ""]
        lines += ["| variant | intervals | worst e2e p99 ms (at) | peak rejection (at) | requests/s min–max |",
                  "|---|---|---|---|---|"]
        for vname in report["variants"]:
            rows = [(r["t"], r["variants"][vname]) for r in timeline if vname in r["variants"]]
            p99 = [(v["e2e_p99_ms"], t) for t, v in rows if v["e2e_p99_ms"] is not None]
            rej = [(v["rejection_rate"], t) for t, v in rows if v["rejection_rate"] is not None]
            rps = [v["requests"] for _, v in rows]
            worst = max(p99) if p99 else None
            peak = max(rej) if rej else None
            lines.append(
                f"| {vname} | {len(rows)} | {_fmt(worst[0]) + f' (t={worst[1]:.0f}s)' if worst else '–'}"
                f" | {_pct(peak[0]) + f' (t={peak[1]:.0f}s)' if peak else '–'}"
                f" | {min(rps) if rps else '–'}–{max(rps) if rps else '–'} |"
            )
    for section in ("crosscheck", "gates"):
        items = report.get(section)
        if items:
            lines.append("")
            lines.append(f"## {section.capitalize()}")
            lines.append("")
            for item in items:
                lines.append(f"- {item.get('summary', item) if isinstance(item, dict) else item}")
                if isinstance(item, dict) and item.get("status") == "failed":
                    lines.extend("  " * (1 + (len(d) - len(d.lstrip())) // 2) + f"- {d.strip()}"
                                 for d in item.get("details", []))
    events = report.get("events") or []
    if events:
        lines.append("")
        lines.append("## Events")
        lines.append("")
        for e in events:
            lines.append(f"- t={e['t']:.1f}s {e['kind']}{' [' + e['variant'] + ']' if e.get('variant') else ''}: {e['message']}")
    return "\n".join(lines) + "\n"


def _split_markdown(report: dict[str, Any]) -> list[str]:
    """Where the time goes, ms: the mean composition of the requests at the corrected-e2e p50, and of
    those at or above its p99; the parts and the client + transport remainder add up to the e2e."""
    lines = ["## Where the time goes, ms (parts + client + transport = corrected e2e of the same requests)", "",
             "| variant | class | requests at | n | schedule lag | server queue | prefill | decode "
             "| client + transport | = e2e corrected | e2e p50 / p99 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for vname, v in epoch_rows(report):
        for cname, c in v["classes"].items():
            e2e = c["latency"].get(Metric.E2E_CORRECTED.value, {})
            beside = f"{_fmt(e2e.get('p50_ms'))} / {_fmt(e2e.get('p99_ms'))}"
            for at, key in (("p50", "p50"), ("≥ p99", "tail")):
                row = (c.get("split") or {}).get(key)
                if row is None:
                    continue
                parts = " | ".join(_fmt(row[f"{k}_ms"]) for k in SPLIT_PARTS)
                if row["timed"] < row["requests"]:  # the untimed requests' server time is in the remainder
                    parts += f" (server time of {row['requests'] - row['timed']} untimed inside)"
                lines.append(f"| {vname} | {cname} | {at} | {row['requests']} | {parts} "
                             f"| {_fmt(row['e2e_corrected_ms'])} | {beside} |")
    return lines


def _accounting_markdown(report: dict[str, Any]) -> list[str]:
    """Every request each epoch was sent, and where it went: nothing may go missing unseen."""
    lines = ["", "## Accounting (planned = completed + errored + warm-up + in transition + lost)", "",
             "| epoch | planned | completed | errored | warm-up | in transition | lost |", "|---|---|---|---|---|---|---|"]
    for label, e in epoch_rows(report):
        a = e["accounting"]
        cells = [_cell(a.get(k)) for k in ("planned", "completed", "errored", "warmup", "in_transition", "lost")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for problem in report["measurement"].get("incomplete") or ():
        lines.append(f"- **measurement incomplete**: {problem}")
    return lines


def _epochs_markdown(report: dict[str, Any]) -> list[str]:
    """Config epochs, transitions and the A/B of every relaunched variant (nothing when none was)."""
    transitions = report.get("transitions") or []
    if not transitions and all(len(v.get("epochs", [])) <= 1 for v in report["variants"].values()):
        return []
    lines = ["", "## Config epochs (never summed across; transitions belong to neither)", "",
             "| epoch | from s | to s | settings | completed | errored |", "|---|---|---|---|---|---|"]
    for label, e in epoch_rows(report):
        settings = " ".join(f"{k}={v}" for k, v in e["settings"].items()
                            if v is not None and not isinstance(v, (dict, list)))
        lines.append(f"| {label} | {e['start_s']:.1f} | {e['end_s']:.1f} | {settings} "
                     f"| {e['accounting']['completed']} | {e['accounting']['errored']} |")
    for t in transitions:
        end = "never answered" if t["end_s"] is None else f"{t['end_s']:.1f} s ({t['end_s'] - t['start_s']:.1f} s)"
        kinds = ", ".join(f"{k}={n}" for k, n in sorted(t["error_kinds"].items())) or "none"
        lines.append(f"- transition {t['variant']} epoch {t['from_epoch']} → {t['to_epoch']}: t={t['start_s']:.1f} s "
                     f"to {end}; {t['requests']} requests, {t['errors']} errors ({kinds})")
    for variant, ab in (report.get("ab") or {}).items():
        prev, cur = ab.get("previous"), ab["current"]
        if prev is None:
            continue
        lines += ["", f"### A/B {variant}: {prev['label']} (intervals {prev['first_interval']}–{prev['last_interval']}) "
                  f"→ {cur['label']} (intervals {cur['first_interval']}–{cur['last_interval']}), each beside "
                  f"{ab['baseline']} over the same intervals", ""]
        if prev.get("note"):
            lines.append(f"Previous window: {prev['note']}.")
        lines += ["| metric | previous | baseline | current | baseline | cur vs prev | cur vs base |",
                  "|---|---|---|---|---|---|---|"]
        for row in ab["rows"]:
            cells = [_cell(row[k]) if row["kind"] != "rate" else _pct(row[k])
                     for k in ("previous", "previous_baseline", "current", "current_baseline")]
            lines.append(f"| {row['metric']} | " + " | ".join(cells) + f" | {row['vs_previous']} | {row['vs_baseline']} |")
    return lines


def _table(rows: list[dict[str, Any]]) -> list[str]:
    keys = list(rows[0].keys())
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_cell(row.get(k)) for k in keys) + " |" for row in rows]
    return out


def write_report(report: dict[str, Any], directory: Path) -> list[Path]:
    json_path = directory / "report.json"
    md_path = directory / "report.md"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        md_path.write_text(render_markdown(report))
    except OSError as error:  # checked before the run; a disk that filled up since is still one line
        raise InputError(f"--report {directory}: cannot write the report: {error.strerror or error}") from None
    return [json_path, md_path]
