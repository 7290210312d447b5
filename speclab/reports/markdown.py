"""The Markdown rendering of a report (``report.md``): read by people, built from ``report.json``'s dict.

Rendering only the JSON document keeps the two in step: whatever a table shows is in the JSON too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speclab.model.errors import InputError
from speclab.model.files import write_text_atomic
from speclab.model.names import Metric
from speclab.model.snapshot import ALL_CLASSES

from .build import SPLIT_PARTS, epoch_rows
from .workers_md import workers_markdown


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
    scale = report.get("time_scale") or 1.0
    if scale != 1.0:
        lines.append(f"**Time scale {scale:g}**: the simulators ran their clock {scale:g}× slower than wall time; "
                     "every time, rate and duration below is modelled time, except the client's own health "
                     "(the traffic workers' table here, `measurement.client` in report.json), which is wall time.")
        lines.append("")
    pair = report.get("pair") or {}
    if pair:
        lines.append("Pair: " + ", ".join(f"{k}={v}" for k, v in sorted(pair.items())))
    lines.append(f"Duration {report['duration_s']:.1f} s · arrival {json.dumps(report.get('arrival', {}))}")
    sat = report["measurement"]["saturated_intervals"]
    own = report["measurement"].get("client_saturated_intervals", sat)
    if sat:
        later = f"; its requests from then finished in {len(sat)} interval(s)" if len(sat) > len(own) else ""
        lines.append(
            f"**Client could not keep up in {len(own)} interval(s)** ({', '.join(map(str, own[:20]))}{later}): "
            f"numbers from {', '.join(map(str, sat[:20]))} describe the client, not the server."
        )
    trailing = {v: d["trailing_intervals"] for v, d in (report.get("simulator_clock") or {}).get("variants", {}).items()
                if d.get("trailing_intervals")}
    if trailing:
        lines.append("**Simulator trailed its modelled clock** (drift over a tenth of the modelled step) in: "
                     + "; ".join(f"{v} {len(ivs)} interval(s) ({', '.join(map(str, ivs[:20]))})" for v, ivs in trailing.items())
                     + ": latencies from those intervals include the host's slowness.")
    if "exit" in report:
        lines.append(f"Exit: {report['exit']['code']} {report['exit']['reason']}")
    lines += _epochs_markdown(report)
    lines += _accounting_markdown(report)
    lines += workers_markdown(report)
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
        lines += ["| epoch | intervals | worst e2e p99 ms (at) | peak rejection (at) | requests/s min–max |",
                  "|---|---|---|---|---|"]
        for label, rows in _timeline_by_epoch(report, timeline):
            p99 = [(v["e2e_p99_ms"], t) for t, v in rows if v["e2e_p99_ms"] is not None]
            rej = [(v["rejection_rate"], t) for t, v in rows if v["rejection_rate"] is not None]
            rps = [v["requests"] for _, v in rows]
            worst = max(p99) if p99 else None
            peak = max(rej) if rej else None
            lines.append(
                f"| {label} | {len(rows)} | {_fmt(worst[0]) + f' (t={worst[1]:.0f}s)' if worst else '–'}"
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


def _timeline_by_epoch(report: dict[str, Any], timeline: list[dict[str, Any]]
                       ) -> list[tuple[str, list[tuple[float, dict[str, Any]]]]]:
    """The timeline's (t, row) pairs per (variant, epoch), labelled as the epoch tables label them:
    a relaunched variant's extremes are never taken over two configurations."""
    groups: dict[tuple[str, int], list[tuple[float, dict[str, Any]]]] = {}
    for vname in report["variants"]:
        for r in timeline:
            if vname in r["variants"]:
                v = r["variants"][vname]
                groups.setdefault((vname, int(v.get("epoch") or 1)), []).append((r["t"], v))
    labels = {(name, e["epoch"]): e.get("label") or name
              for name, v in report["variants"].items() for e in v.get("epochs", [])}
    return [(labels.get(key) or (key[0] if key[1] <= 1 else f"{key[0]}·{key[1]}"), rows)
            for key, rows in groups.items()]  # variants in report order, each one's epochs as the timeline met them


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
        write_text_atomic(json_path, json.dumps(report, indent=2, default=str) + "\n")
        write_text_atomic(md_path, render_markdown(report))
    except OSError as error:  # checked before the run; a disk that filled up since is still one line
        raise InputError(f"--report {directory}: cannot write the report: {error.strerror or error}") from None
    return [json_path, md_path]
