"""The drill's report (report.json with its ``drill`` block, report.md with the drill first) and exit code.

``drill`` holds what the file format pins — ``rollback_s``, ``drain_s``, ``in_flight_at_flip``,
``failed_during_flip``, ``converged``, ``tenants`` — and beside them how each was observed.
``tenants`` gives each drill tenant's figures per phase: ``plain`` (before the switch, everyone
on the baseline), ``canary`` (the canary tenant on the speculative pool) and ``rolled_back``
(after the rollback command). A request belongs to the phase in which it was sent, since that is
when the gateway chose its backend. The variant tables are per backend (the server that answered).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from speclab.gates.drill import ROLLBACK_LIMIT_S, drill_failures
from speclab.gates.spikes import link
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.groups import group_summary
from speclab.model.errors import SpeclabError, writing
from speclab.model.exit_codes import ExitCode
from speclab.model.files import write_text_atomic
from speclab.model.names import INTERVAL_S
from speclab.model.records import RequestRecord
from speclab.reports import build_report, render_markdown, write_report
from speclab.servers.pairing import pair_info, require_pairing
from speclab.session.api import SessionInfo
from speclab.session.drill import DrillOutcome, run_drill
from speclab.session.drill_metrics import UNROUTED, by_backend
from speclab.session.drill_plan import DrillOptions
from speclab.session.signals import catch_interrupts, hold, release_interrupts

PHASES = ("plain", "canary", "rolled_back")


def _phase_of(record: RequestRecord, outcome: DrillOutcome) -> str | None:
    if record.sent is None:
        return None
    if outcome.switch_s is None or record.sent < outcome.switch_s:
        return "plain"
    if outcome.flip is None or record.sent < outcome.flip.command_s:
        return "canary"
    return "rolled_back"


def _spans(outcome: DrillOutcome) -> dict[str, tuple[float, float] | None]:
    switch = outcome.switch_s
    command = outcome.flip.command_s if outcome.flip else None
    return {"plain": (outcome.traffic_start, switch if switch is not None else outcome.end_s),
            "canary": (switch, command if command is not None else outcome.end_s) if switch is not None else None,
            "rolled_back": (command, outcome.end_s) if command is not None else None}


def tenants_block(outcome: DrillOutcome) -> dict[str, Any]:
    plan = outcome.plan
    measured = [r for r in outcome.records if not r.warmup]
    spans = _spans(outcome)
    out: dict[str, Any] = {}
    for tenant, role in ((plan.control, "control"), (plan.canary, "canary")):
        mine = [r for r in measured if r.tenant == tenant]
        phases: dict[str, Any] = {}
        for phase in PHASES:
            span = spans.get(phase)
            if span is None:
                continue
            rows = [r for r in mine if _phase_of(r, outcome) == phase]
            start, end = span
            window = max(0.0, end - start)
            backends: dict[str, int] = {}
            for r in rows:
                backends[r.backend or UNROUTED] = backends.get(r.backend or UNROUTED, 0) + 1
            phases[phase] = {"start_s": round(start, 3), "end_s": round(end, 3),
                             "pool": plan.pool if (phase == "canary" and role == "canary") else plan.routing.baseline,
                             "backends": dict(sorted(backends.items())), **group_summary(rows, window)}
        out[tenant] = {"role": role, "phases": phases}
    return out


def _trigger_block(outcome: DrillOutcome) -> dict[str, Any] | None:
    plan = outcome.plan
    if not plan.triggers:
        return None
    fired = outcome.fired
    block: dict[str, Any] = {"triggers": [t.spec for t in plan.triggers], "intervals": plan.trigger_intervals,
                             "fired": fired is not None, "judged": outcome.trigger_rows}
    if fired is not None:
        first = fired.intervals[0][0] * INTERVAL_S
        block.update({"trigger": fired.trigger.spec, "message": fired.message,
                      "streak": [{"interval": i, "value": round(v, 3)} for i, v in fired.intervals],
                      "spike": link(first, f"{fired.trigger.metric} above {fired.trigger.spec}", outcome.events)})
    return block


def drill_block(outcome: DrillOutcome) -> dict[str, Any]:
    measure = outcome.measure
    base = measure.as_dict() if measure is not None else {
        "rollback_s": None, "drain_s": None, "confirmed_s": None, "in_flight_at_flip": 0,
        "failed_during_flip": 0, "converged": False, "observers": {}, "failed_samples": []}
    flip = outcome.flip
    return {
        **{k: base[k] for k in ("rollback_s", "drain_s", "in_flight_at_flip", "failed_during_flip", "converged")},
        "tenants": tenants_block(outcome),
        "confirmed_s": base["confirmed_s"],
        "limit_s": ROLLBACK_LIMIT_S,
        "rollback_by": flip.by if flip else None,
        "command_s": round(flip.command_s, 3) if flip else None,
        "switch_s": None if outcome.switch_s is None else round(outcome.switch_s, 3),
        "traffic_start_s": round(outcome.traffic_start, 3),
        "observers": base["observers"],
        "failed_samples": base["failed_samples"],
        "trigger": _trigger_block(outcome),
        "failures": drill_failures(measure) if not outcome.interrupted else [],
        "plan": outcome.plan.facts(),
        "gateway": outcome.gateway,
        "wall_s": outcome.wall_s,
    }


def judge(outcome: DrillOutcome, block: dict[str, Any]) -> tuple[ExitCode, str]:
    measured = [r for r in outcome.records if not r.warmup]
    if outcome.interrupted:
        return ExitCode.INTERRUPTED, "interrupted; the partial report covers what was measured"
    if outcome.server_not_ready:
        return ExitCode.SERVER_NOT_READY, outcome.server_not_ready
    if outcome.failure:
        return ExitCode.INTERNAL_ERROR, outcome.failure
    if outcome.traffic_errors:
        return ExitCode.MEASUREMENT_INCOMPLETE, "; ".join(outcome.traffic_errors)
    if not measured or all(not r.ok for r in measured):
        first = next((r.error_message for r in measured if r.error_message), "no request finished")
        return ExitCode.ALL_REQUESTS_FAILED, f"every request failed: {first}"
    if block["failures"]:
        return ExitCode.ROLLBACK_DRILL, "; ".join(block["failures"])
    return ExitCode.OK, (f"rollback_s {block['rollback_s']:.3f} s, drain_s {block['drain_s']:.3f} s, "
                         f"{block['in_flight_at_flip']} in flight at the flip, none failed")


def drill_markdown(block: dict[str, Any]) -> list[str]:
    def f(value: Any, unit: str = " s", spec: str = ".3f") -> str:
        return "–" if value is None else f"{value:{spec}}{unit}"

    lines = ["## Rollback drill", "",
             f"Rollback ({block['rollback_by'] or 'not made'}): **rollback_s {f(block['rollback_s'])}** (command → last "
             f"request routed to a speculative backend; limit {block['limit_s']:g} s), **drain_s {f(block['drain_s'])}** "
             f"(→ last in-flight speculative response finished), HAProxy confirmed the routing after "
             f"{f(block['confirmed_s'])}; {block['in_flight_at_flip']} speculative request(s) in flight at the flip, "
             f"{block['failed_during_flip']} failed during it; converged: {'yes' if block['converged'] else 'NO'}.", ""]
    client, haproxy = block["observers"].get("client", {}), block["observers"].get("haproxy", {})
    if client or haproxy:
        lines += ["| observer | last speculative routed s | drained s | in flight at flip | after the command |",
                  "|---|---|---|---|---|",
                  f"| client (records) | {f(client.get('last_speculative_sent_s'), '')} | "
                  f"{f(client.get('last_speculative_finished_s'), '')} | {client.get('in_flight_at_flip')} | "
                  f"{client.get('speculative_sent_after_command')} sent |",
                  f"| HAProxy (runtime API, {haproxy.get('polls')} polls) | {f(haproxy.get('last_routed_s'), '')} | "
                  f"{f(haproxy.get('drained_s'), '')} | {haproxy.get('in_flight_at_flip')} | "
                  f"{haproxy.get('routed_after_command')} routed |", ""]
    trigger = block.get("trigger")
    if trigger:
        lines.append(f"Triggers {', '.join(trigger['triggers'])} for {trigger['intervals']} intervals: "
                     + (f"fired: {trigger['message']}; {trigger['spike']['text']}." if trigger["fired"]
                        else "never fired; the scheduled rollback was made."))
        lines.append("")
    lines += ["| tenant | role | phase | pool | requests | errors | backends | e2e p50 ms | e2e p99 ms | "
              "acceptance | rejection | structured failures |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for tenant, t in block["tenants"].items():
        for phase, p in t["phases"].items():
            backends = ", ".join(f"{k} {n}" for k, n in p["backends"].items()) or "–"
            lines.append(f"| {tenant} | {t['role']} | {phase} | {p['pool']} | {p['requests']} | {p['errors']} | "
                         f"{backends} | {f(p['e2e_p50_ms'], '', '.1f')} | {f(p['e2e_p99_ms'], '', '.1f')} | "
                         f"{_rate(p['acceptance_rate'])} | {_rate(p['rejection_rate'])} | "
                         f"{_rate(p['structured_failure_rate'])} |")
    for line in block["failures"]:
        lines.append(f"- FAIL {line}")
    return [*lines, ""]


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def build_drill_report(outcome: DrillOutcome, code: ExitCode, reason: str, block: dict[str, Any]) -> dict[str, Any]:
    plan = outcome.plan
    relabelled = by_backend(outcome.records)
    classes = [c.name for c in plan.plan.classes]
    agg = Aggregator.from_records(relabelled, list(plan.routing.variants), classes, end_t=max(outcome.end_s, 0.0),
                                  interval_s=INTERVAL_S, simulated=outcome.simulated, warmup_s=plan.plan.warmup_s)
    snap = agg.snapshot(max(outcome.end_s, 0.0), finished=True)
    pair = pair_info(plan.lab, require_pairing(plan.lab, force=True))
    info = SessionInfo(lab=plan.lab.name, scenario=plan.plan.name, variants=tuple(plan.routing.variants),
                       classes=tuple(classes), simulated=outcome.simulated, pair={k: str(v) for k, v in pair.items()},
                       arrival={"mode": plan.plan.mode, "process": plan.plan.process, "duration_s": plan.duration_s,
                                "tenants": [plan.control, plan.canary], **plan.plan.overrides},
                       time_scale=outcome.time_scale.s)
    extra = {"engine": outcome.engine, "drill": block, "events": [e.to_dict() for e in outcome.events],
             "requests_sent": len(outcome.records), "exit": {"code": int(code), "name": code.name, "reason": reason}}
    return build_report(info, snap, servers=outcome.servers, command="drill", extra=extra)


def _s(seconds: object) -> str:
    """A duration the drill may not have measured (an interrupted drill never flipped)."""
    return "not measured" if seconds is None else f"{seconds} s"


def write_drill_report(report: dict[str, Any], directory: Path) -> list[Path]:
    paths = write_report(report, directory)
    text = render_markdown(report)
    head, sep, rest = text.partition("\n## ")
    md = head + "\n" + "\n".join(drill_markdown(report["drill"])) + "\n" + (sep.lstrip("\n") + rest if sep else "")
    with writing(f"--report {directory}", "the drill report"):
        write_text_atomic(paths[1], md)
    return paths


async def drill_command(options: DrillOptions, out: TextIO = sys.stdout) -> ExitCode:
    outcome = await run_drill(options, out)
    try:
        block = drill_block(outcome)
        code, reason = judge(outcome, block)
        report = build_drill_report(outcome, code, reason, block)
        summary = (f"drill: rollback_s {_s(block['rollback_s'])}, drain_s {_s(block['drain_s'])}, in flight at the "
                   f"flip {block['in_flight_at_flip']}, failed during it {block['failed_during_flip']}, converged "
                   f"{block['converged']}")
        verdict = f"exit {int(code)} ({code.name.lower()}): {reason}"
        catch_interrupts()  # the drill is judged: a Ctrl-C now would only cut its report short, so it waits
        try:
            paths = write_drill_report(report, outcome.plan.report_dir)
        except SpeclabError:  # the drill's figures are said before the report's error
            print(summary, f"the drill's verdict, before the report failed: {verdict}", sep="\n", file=out, flush=True)
            raise
        finally:
            release_interrupts()
        for path in paths:
            print(f"report: {path}", file=out)
        print(summary, file=out)
        print(verdict, file=out, flush=True)
        if outcome.metrics is not None and options.metrics_hold_s > 0 and not outcome.interrupted:
            print(f"metrics: serving the final figures {options.metrics_hold_s:g} s more", file=out, flush=True)
            await hold(options.metrics_hold_s)
    finally:
        if outcome.metrics is not None:
            outcome.metrics.close()
    return code
