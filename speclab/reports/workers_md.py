"""The report.md table of traffic workers: where each ran and whether it kept up."""

from __future__ import annotations

from typing import Any


def workers_markdown(report: dict[str, Any]) -> list[str]:
    """One row per worker (``measurement.workers``); nothing for a run of one local worker."""
    rows = report["measurement"].get("workers") or []
    if len(rows) <= 1 and all(r.get("node") == "local" for r in rows):
        return []
    nodes = sorted({r["node"] for r in rows})
    lines = ["", f"## Traffic workers ({len(rows)} on {len(nodes)} node{'s' if len(nodes) != 1 else ''})", "",
             "| worker | node | sent | schedule lag p99 ms | send delay p99 ms | read lateness ms | CPU max % | "
             "clock offset ms | ± bound ms | saturated intervals |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['worker']} | {r['node']} | {r['sent']} | {r['schedule_lag_p99_ms']:.2f} | "
                     f"{_ms(r.get('send_delay_p99_ms'))} | {_ms(r.get('read_lateness_ms'))} | "
                     f"{r['cpu_percent_max']:.0f} | {r['clock_offset_ms']:.3f} | "
                     f"{r['clock_bound_ms']:.3f} | {r['saturated_intervals']} of {r['intervals']} |")
    return lines


def _ms(value: object) -> str:
    """A figure a recording from an older speclab may lack: ``-`` rather than a 0 it never measured."""
    return f"{value:.1f}" if isinstance(value, int | float) else "-"
