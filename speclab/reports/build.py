"""The run report as a versioned JSON document (``report.json``), built from the final ``Snapshot``.

It is built from the same stream the UI shows, so a report recomputed from a recording equals the
live one. It sits below the session and the front ends, which all write it (run, accept, sweep,
drill, replay), and reads only the model.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from typing import Any

from speclab import __version__
from speclab.model.ab_rows import ab_rows, change_text
from speclab.model.epochs import EpochInfo
from speclab.model.latency_metrics import SPLIT_METRICS, SPLIT_REMAINDER
from speclab.model.records import Event
from speclab.model.snapshot import (
    ABView,
    ABWindow,
    ClassStats,
    EpochStats,
    Percentiles,
    Snapshot,
    SplitRow,
)
from speclab.model.views import ServerView, SessionInfo

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


SPLIT_PARTS = (*(m.value for m in SPLIT_METRICS), SPLIT_REMAINDER[0])


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


def server_dict(view: ServerView | None, last: dict[str, Any], *, relaunch_unfinished: bool) -> dict[str, Any]:
    """The server of the variant's last epoch (``last``: its ``epochs`` entry), live or replayed alike.

    ``view`` is the server running at the end. Its command and memory are the epoch's only when it
    runs the epoch's settings and no relaunch out of the epoch was left unfinished (a server that
    never answered is no epoch's); otherwise they are absent, never one epoch's beside another's."""
    own = view is not None and dict(view.settings) == last["settings"] and not relaunch_unfinished
    return {
        "epoch": last["epoch"],
        "label": last["label"],
        "engine": view.engine if view else None,
        "command": view.command if own and view else None,
        "settings": dict(last["settings"]),
        "memory": dict(view.memory) if own and view else {},
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
    workers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON report of one run; ``extra`` adds sections (gates, memory, crosscheck, exit).

    ``events`` are the whole run's (a consumer of the stream collects them; by default the final
    snapshot's, which holds them all when it is the stream's only snapshot, as in a replay);
    ``timeline`` the per-interval rows (``headless.progress.timeline_rows``); ``incomplete`` what
    the traffic side lost (dead workers, dropped record batches)."""
    variants: dict[str, Any] = {}
    for name, vstats in final.cumulative.items():
        view = servers.get(name)
        epochs = [epoch_dict(e, view, final.t) for e in final.epochs.get(name, ())] \
            or [epoch_dict(EpochStats(_first_epoch(name), vstats), view, final.t)]
        unfinished = {t.from_epoch for t in final.transitions if t.variant == name and t.end_s is None}
        variants[name] = {
            "baseline": bool(view and view.baseline),
            "server": server_dict(view, epochs[-1], relaunch_unfinished=epochs[-1]["epoch"] in unfinished),
            "epochs": epochs,
        }
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "speclab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
        "simulated": info.simulated,
        "time_scale": info.time_scale,
        "lab": info.lab,
        "scenario": info.scenario,
        "pair": dict(info.pair),
        "arrival": dict(info.arrival),
        "replay": info.replay,
        "duration_s": round(final.t, 3),
        "classes": list(info.classes),
        "measurement": {
            "saturated_intervals": list(final.saturated_intervals),  # whose numbers a saturated client touched
            "client_saturated_intervals": list(final.saturated_sends),  # in which it was saturated (the exit's count)
            "incomplete": list(incomplete),
            "client": {  # the worst interval of the run, in wall time (client health is judged before any scaling)
                "clock": "wall",
                "schedule_lag_p99_ms": final.run_health.schedule_lag_p99_ms,
                "loop_lag_max_ms": final.run_health.loop_lag_max_ms,
                "cpu_percent": final.run_health.cpu_percent,
                "send_delay_p99_ms": final.run_health.send_delay_p99_ms,
                "read_lateness_ms": final.run_health.read_lateness_ms,
            },
            **({"workers": workers} if workers is not None else {}),  # each traffic worker and its node
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
