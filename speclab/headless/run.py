"""`speclab run`: a live session without a screen, one progress line per second, a report, an exit code."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any, TextIO

from speclab.metrics.crosscheck import mismatches
from speclab.metrics.sim_drift import GROWTH_LIMIT
from speclab.model.errors import SpeclabError
from speclab.model.exit_codes import ExitCode
from speclab.model.records import Event
from speclab.model.snapshot import Snapshot
from speclab.reports import build_report, write_report
from speclab.session.follow import follow
from speclab.session.live import LiveSession
from speclab.session.options import RunOptions
from speclab.session.signals import catch_interrupts, hold, release_interrupts

from .progress import client_saturation, progress_line, timeline_rows

SATURATED_LIMIT = 0.5  # more than this share of intervals saturated: the measurement is invalid
MIN_INTERVALS_TO_JUDGE = 5  # a run of a few seconds is flagged per interval, not failed as a whole


def judge(session: LiveSession, final: Snapshot, interrupted: bool) -> tuple[ExitCode, str]:
    """The exit code of a finished run and its one-line reason."""
    tally = session.tally
    if interrupted:
        return ExitCode.INTERRUPTED, "interrupted; the partial report and recording cover what was measured"
    if session.change_failures:
        return ExitCode.SERVER_NOT_READY, "; ".join(session.change_failures)
    exited = session.servers_exited
    if exited:  # its numbers stop where it died: not a run to read as "ok"
        return ExitCode.SERVER_NOT_READY, "; ".join(f"{variant}: {why}" for variant, why in exited.items())
    incomplete = incomplete_reason(session, final)
    if incomplete:
        return ExitCode.MEASUREMENT_INCOMPLETE, incomplete
    if tally.all_failed:
        kinds = sorted(tally.error_kinds)
        return ExitCode.ALL_REQUESTS_FAILED, f"every request failed ({', '.join(kinds)}): {tally.first_error}"
    if not tally.measured:
        return ExitCode.ALL_REQUESTS_FAILED, "no request finished"
    saturated, intervals = client_saturation(final)
    if intervals >= MIN_INTERVALS_TO_JUDGE and saturated > SATURATED_LIMIT * intervals:
        return (ExitCode.MEASUREMENT_INVALID,
                f"the client could not keep up in {saturated} of {intervals} intervals")
    behind = simulator_behind(session)
    if behind:
        return ExitCode.MEASUREMENT_INVALID, behind
    if tally.measured_failed:  # some failed, not all: exit 0 as documented, the failures said
        return (ExitCode.OK, f"ok, but {tally.measured_failed} of {tally.measured} requests failed "
                f"({', '.join(sorted(tally.error_kinds))})"
                + (f": {tally.first_error}" if tally.first_error else ""))
    return ExitCode.OK, "ok"


def simulator_behind(session: LiveSession) -> str:
    """The line that says a simulator (not the client) trailed its clock for most of the run, or ""."""
    worst = [v for v in session.drift.verdicts()
             if v.intervals >= MIN_INTERVALS_TO_JUDGE and v.share > SATURATED_LIMIT and v.fell_behind]
    if not worst:
        return ""
    scale = session.time_scale.s
    parts = ", ".join(f"{v.variant} in {len(v.trailing)} of {v.intervals} intervals (drift p99 "
                      f"{v.drift_p99_s * 1000:.1f} ms against a modelled step of {v.step_mean_s * 1000:.1f} ms"
                      + (f", growing {v.growth * 1000:.0f} ms per second" if v.growth > GROWTH_LIMIT else "") + ")"
                      for v in worst)
    return (f"the simulator, not the client, fell behind its modelled clock at time scale {scale:g}: {parts}; "
            f"--time-scale {session.drift.fit(scale):g} would fit this host")


def incomplete_reason(session: LiveSession, final: Snapshot) -> str:
    """Why the measurement is incomplete (a dead worker, a dropped batch, a lost request), or ""."""
    problems = session.traffic_errors()
    lost = {e.stats.label or name: e.accounting.lost for name, epochs in final.epochs.items() for e in epochs
            if e.accounting.lost}
    if lost:
        problems.append("requests begun but never recorded: " + ", ".join(f"{k} {n}" for k, n in lost.items()))
    return "; ".join(problems)


def session_report(session: LiveSession, final: Snapshot, code: ExitCode, reason: str, *, command: str,
                   events: list[Event]) -> dict[str, Any]:
    """The report.json of one session's run, as `run` writes it (a sweep cell writes the same)."""
    return build_report(session.info, final, servers=session.servers(), command=command, events=events,
                        timeline=flag_trailing(timeline_rows(session.aggregator, final.saturated_intervals),
                                               session.drift.trailing()),
                        incomplete=session.traffic_errors(), extra=report_extra(session, code, reason),
                        workers=session.worker_table.rows())


def report_extra(session: LiveSession, code: ExitCode, reason: str) -> dict[str, Any]:
    """Memory and cross-check rows are per (variant, epoch), each with its ``epoch`` and ``label``."""
    checks = session.tally.crosscheck_epochs()
    return {
        "engine": session.engine_label,
        "memory": session.tally.memory_rows(session.servers_running),
        "gpu_memory": [{"gpu": g.index, "name": g.name, "peak_used_gib": round(g.used_gib, 2),
                        "total_gib": round(g.total_gib, 2)} for g in session.gpu_peak.values()],
        "crosscheck": [{"summary": c.check.message, "ok": c.check.ok, "variant": c.variant, "epoch": c.epoch,
                        "label": c.label, "quantity": c.check.quantity, "client": c.check.client,
                        "server": c.check.server} for c in checks],
        "crosscheck_ok": not mismatches(c.check for c in checks),
        "exit": {"code": int(code), "name": code.name, "reason": reason},
        "simulator_clock": {"time_scale": session.time_scale.s, "chosen": session.time_scale.reason,
                            "variants": {v.variant: v.as_dict() for v in session.drift.verdicts()}},
    }


def sim_flag(session: LiveSession, snap: Snapshot) -> str:
    """`` | SIM BEHIND (k4)`` when a simulator trailed its clock in the interval just closed."""
    last = max((i.index for i in snap.intervals), default=snap.interval)
    behind = sorted(v for v, intervals in session.drift.trailing().items() if intervals and intervals[-1] >= last)
    return f" | SIM BEHIND ({', '.join(behind)})" if behind else ""


def flag_trailing(rows: list[dict[str, Any]], trailing: dict[str, list[int]]) -> list[dict[str, Any]]:
    """Each timeline row names the simulators that trailed their clock in it (beside client_saturated)."""
    for row in rows:
        row["sim_trailing"] = sorted(v for v, intervals in trailing.items() if row["interval"] in intervals)
    return rows


async def run_session(options: RunOptions, out: TextIO = sys.stdout) -> ExitCode:
    """Records stream to the recording and the aggregator; the parent keeps none of them."""
    session = LiveSession(dataclasses.replace(options, keep_records=False))
    print(session.first_line(), file=out, flush=True)
    try:
        if session.metrics is not None:
            print(f"metrics: {session.metrics.url} (speclab's own series, for Prometheus)", file=out, flush=True)
        code = await follow_to_end(session, out)
        if session.metrics is not None and options.metrics_hold_s > 0:
            print(f"metrics: serving the final figures {options.metrics_hold_s:g} s more", file=out, flush=True)
            await hold(options.metrics_hold_s)
        return code
    finally:
        session.close_metrics()


async def follow_to_end(session: LiveSession, out: TextIO) -> ExitCode:
    """Start the session, print progress until it ends (or Ctrl-C), write the report, judge it."""
    options = session.options
    interrupted = catch_interrupts()  # held until the report is written: a late Ctrl-C loses nothing
    try:
        try:
            await session.ensure_started()
            events: list[Event] = []
            final = await _follow(session, interrupted, out, events)
        except BaseException:
            await session.stop("failed")
            raise
        was_interrupted = interrupted.is_set()
        await session.stop("interrupted" if was_interrupted else "complete")
        code, reason = judge(session, final, was_interrupted)
        for c in mismatches(session.tally.crosscheck()):
            print(f"warning: acceptance cross-check: {c.message}", file=out)
        recording = None
        if options.record_path is not None:
            failure = getattr(session.recorder, "failure", None)
            recording = f"recording: {options.record_path}" + (f" ({failure})" if failure else "")
        verdict = f"exit {int(code)} ({code.name.lower()}): {reason}"
        if options.report_dir is not None:
            report = session_report(session, final, code, reason, command="run", events=events)
            try:
                paths = write_report(report, Path(options.report_dir))
            except SpeclabError:  # the run's own verdict and recording are still said, before the error
                print(*filter(None, (recording, f"the run's verdict, before the report failed: {verdict}")),
                      sep="\n", file=out, flush=True)
                raise
            print(f"report: {', '.join(str(p) for p in paths)}", file=out)
        print(*filter(None, (recording, verdict)), sep="\n", file=out, flush=True)
        return code
    finally:
        release_interrupts()


async def _follow(session: LiveSession, interrupted: asyncio.Event, out: TextIO,
                  events: list[Event]) -> Snapshot:
    """Print every event and a line per snapshot that closed intervals (and keep every event for
    the report) until the run ends or is interrupted; return the final snapshot."""
    async def step(snap: Snapshot) -> bool:
        events.extend(snap.events)
        for event in snap.events:
            print(f"event t={event.t:.1f}s {event.kind}: {event.message}", file=out)
        if snap.intervals:
            print(progress_line(snap) + sim_flag(session, snap), file=out, flush=True)
        return False

    def say_interrupted() -> None:
        print("interrupted: draining in-flight requests, writing what was measured", file=out, flush=True)

    final, _ = await follow(session, interrupted, step, on_interrupt=say_interrupted,
                            drain=lambda snap: events.extend(snap.events))
    return final
