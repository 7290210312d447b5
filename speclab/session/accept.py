"""`speclab accept LAB`: the release gates in the checklist's order, one exit code a CI can trust.

Tokenizer alignment runs before any server starts; then the lab's servers start once and the
golden set, equivalence, structured output, latency curve, concurrency stress and canary run
against them in the order of ``gates.stages.STAGES``. The first failing stage stops the run (unless ``keep_going``)
and its code is the exit code. Whatever happens — a failure, a server that never came up,
Ctrl-C — the servers are stopped and report.json, report.md and junit.xml are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from speclab import __version__
from speclab.gates.answered import check_answered, unanswered_result
from speclab.gates.golden import check_gate_classes, load_golden
from speclab.gates.junit import write_junit
from speclab.gates.result import StageResult
from speclab.gates.stages import CANARY, GOLDEN, STAGE_ORDER, spec
from speclab.metrics.aggregator import Aggregator
from speclab.model.errors import InputError, ServerNotReadyError, SpeclabError
from speclab.model.exit_codes import ExitCode
from speclab.model.gates import load_gates
from speclab.model.lab import load_lab
from speclab.model.names import INTERVAL_S
from speclab.model.paths import BUNDLED
from speclab.model.scenario import load_scenario
from speclab.model.snapshot import Snapshot
from speclab.model.time_scale import TimeScale
from speclab.recording.preflight import check_outputs
from speclab.reports import build_report, write_report
from speclab.servers.backends import AUTO, EngineRequest
from speclab.servers.engine import select_engine
from speclab.servers.manager import ServerManager
from speclab.servers.memory import memory_table
from speclab.servers.pairing import pair_info, require_pairing

from .accept_context import AcceptContext
from .accept_load import load_plan
from .accept_servers import server_states
from .accept_stages import RUNNERS
from .api import ServerView, SessionInfo
from .server_watch import server_view
from .signals import catch_interrupts, release_interrupts
from .time_scale import refuse_for_real_engine, resolve_time_scale

CANARY_SCENARIO = "mixed"
GOLDEN_DIR = BUNDLED / "scenarios" / "golden"


@dataclass(frozen=True)
class AcceptOptions:
    lab: str
    gates_file: str | None = None
    profile: str = "quick"
    stages: tuple[str, ...] | None = None
    keep_going: bool = False
    report_dir: str | Path | None = None
    record_path: str | Path | None = None
    engine: EngineRequest = AUTO
    force: bool = False
    seed: int | None = None
    workers: int | None = 1  # None: one per CPU of the cluster
    cluster: str | None = None  # --cluster: the load stages' traffic workers on this Ray cluster
    overrides: dict[str, Any] | None = None  # per-stage gate overrides, e.g. {"equivalence": {"samples": 50}}
    time_scale: float | None = None  # --time-scale S; None: auto, for the heaviest load stage


def selected_stages(stages: tuple[str, ...] | None) -> tuple[str, ...]:
    """The requested subset in the registry's order; unknown names are bad input."""
    if stages is None:
        return STAGE_ORDER
    if not any(stages) or not all(stages):
        raise InputError(f"--stages {','.join(stages)!r}: a stage name is empty; expected some of "
                         f"{', '.join(STAGE_ORDER)}, separated by commas")
    unknown = [s for s in stages if s not in STAGE_ORDER]
    if unknown:
        raise InputError(f"--stages: unknown stage {', '.join(unknown)}; expected some of {', '.join(STAGE_ORDER)}")
    return tuple(s for s in STAGE_ORDER if s in stages)


class _Run:
    """One accept run: stage results as they come, the snapshot for the report's tables."""

    def __init__(self, options: AcceptOptions, out: TextIO) -> None:
        self.options = options
        check_outputs(options.record_path, options.report_dir, force=options.force)  # exit 2 before any server
        self.stages = selected_stages(options.stages)
        self.lab = load_lab(options.lab)
        for stage in self.stages:
            preflight = RUNNERS[stage].preflight
            if preflight is not None:
                preflight(self.lab)
        self.profile = load_gates(options.gates_file).profile(options.profile, options.overrides)
        refuse_for_real_engine(options.time_scale, options.engine)
        self.engine = select_engine(options.engine)
        self.pairing = require_pairing(self.lab, force=options.force)
        self.pair = pair_info(self.lab, self.pairing)
        canary = load_scenario(CANARY_SCENARIO)
        self.ctx = AcceptContext(
            lab=self.lab, profile=self.profile, engine=self.engine,
            seed=options.seed if options.seed is not None else canary.seed, force=options.force,
            golden_cases=load_golden(GOLDEN_DIR), canary_scenario=canary, out=out,
            record_path=options.record_path, pair=self.pair, workers=options.workers, cluster=options.cluster,
        )
        if GOLDEN in self.stages:
            check_gate_classes(self.profile.golden, self.ctx.golden_cases, str(options.gates_file or "gates"))
        self.scale_note = ""
        self.ctx.time_scale = self._time_scale()
        if options.report_dir is not None:
            self.ctx.gateway_dir = Path(options.report_dir) / "gateway"
        self.results: dict[str, StageResult] = {}
        self.snapshot: Snapshot | None = None
        self.snapshot_from = ""
        self.manager: ServerManager | None = None
        self.started = time.monotonic()

    def _time_scale(self) -> TimeScale:
        """One S for every stage: the given one, or auto's for the heaviest load stage. The quick
        profile (tests, a first look) keeps auto at 1 so it stays quick, and says what would fit."""
        top = max([*self.profile.latency.concurrency, self.profile.stress.concurrency])
        plan = load_plan(self.ctx, requests=self.profile.stress.requests, concurrency=top)
        chosen = resolve_time_scale(self.options.time_scale, engine=self.engine.engine, lab=self.lab,
                                    variants=self.lab.variant_names, plan=plan)
        if self.options.time_scale is None and self.profile.name == "quick" and chosen.scaled:
            self.scale_note = (f"note: this host keeps up with the heaviest load stage at --time-scale {chosen.s:g} "
                               "(auto stays 1 for the quick profile); its latencies include the host's slowness")
            return TimeScale(1.0, "auto: 1 for the quick profile")
        return chosen

    def first_line(self) -> str:
        sim = "SIMULATED" if self.engine.simulated else "not simulated"
        if self.ctx.time_scale.scaled:
            sim += f"; time scale {self.ctx.time_scale.s:g} ({self.ctx.time_scale.reason}): figures in modelled time"
        return (f"speclab {__version__} accept: lab {self.lab.name} ({', '.join(self.lab.variant_names)}), "
                f"profile {self.profile.name}, stages {', '.join(self.stages)}; {sim} (engine {self.engine})")

    async def start_servers(self) -> None:
        log_dir = Path(tempfile.mkdtemp(prefix="speclab-accept-logs-"))
        self.ctx.log_dir = log_dir
        self.manager = ServerManager(self.lab, self.engine.engine, log_dir=log_dir, time_scale=self.ctx.time_scale.s)
        t0 = time.monotonic()
        self.ctx.set_servers(await self.manager.start(self.lab.variant_names))
        self.ctx.say(f"servers ready in {time.monotonic() - t0:.1f} s: "
                     + ", ".join(f"{n} {s.base_url}" for n, s in self.ctx.servers.items()))

    async def stop(self) -> None:
        """Idempotent: close the HTTP session and stop every launched server."""
        await self.ctx.close()
        if self.manager is not None:
            manager, self.manager = self.manager, None
            await manager.stop()
        if self.ctx.log_dir is not None:
            shutil.rmtree(self.ctx.log_dir, ignore_errors=True)

    def _keep(self, snap: Snapshot | None, source: str) -> None:
        if snap is not None:
            self.snapshot, self.snapshot_from = snap, source

    async def _stage(self, stage: str) -> StageResult:
        """Run one stage, then fail it with the cause if its requests were not all answered."""
        before = Counter(self.ctx.answered)
        self.ctx.begin_stage()
        result = await self._evaluate(stage)
        answers = self.ctx.stage_answers
        if not answers.total or result.skipped:
            return result
        allowed = spec(stage).allowed_error_pct(self.profile)
        states = await server_states(self.ctx.servers, answers.error_kinds())
        lines = check_answered(stage, answers, states=states, answered_before=before, allowed_error_pct=allowed)
        return unanswered_result(result, lines)

    async def _evaluate(self, stage: str) -> StageResult:
        facts = spec(stage)
        if facts.speed and self.ctx.misaligned:
            return StageResult.skip(stage, "tokenizers misaligned: no speed-up is measured on this pair (use --force)")
        if facts.needs_servers and self.manager is None:
            await self.start_servers()
        result, snap = await RUNNERS[stage].run(self.ctx)
        self._keep(snap, stage)
        return result

    async def run_stages(self) -> None:
        for stage in self.stages:
            t0 = time.monotonic()
            self.ctx.say(f"stage {stage}: running")
            result = await self._stage(stage)
            self.results[stage] = result
            self.ctx.say(f"stage {stage}: {result.status.upper()} in {time.monotonic() - t0:.1f} s: {result.summary}")
            for line in result.details:
                if line.startswith("FAIL "):
                    self.ctx.say(f"  {line}")
            if not result.passed and not self.options.keep_going:
                return

    def ordered_results(self, reason_missing: str) -> list[StageResult]:
        return [self.results.get(s) or StageResult.skip(s, reason_missing) for s in self.stages]

    def exit_code(self) -> ExitCode:
        for result in self.ordered_results(""):
            if not result.passed and not result.skipped:
                return ExitCode(result.exit_code)
        return ExitCode.OK

    def final_snapshot(self) -> Snapshot:
        if self.snapshot is not None:
            return self.snapshot
        self.snapshot_from = "every request of the run"
        agg = Aggregator.from_records(self.ctx.spool.records(), self.lab.variant_names, [],
                                      end_t=max(self.ctx.now(), 0.0), interval_s=INTERVAL_S,
                                      simulated=self.engine.simulated)
        return agg.snapshot(max(self.ctx.now(), 0.0), finished=True)

    def write(self, code: ExitCode, reason: str, skipped_reason: str) -> list[Path]:
        results = self.ordered_results(skipped_reason)
        snap = self.final_snapshot()
        report_dir = Path(self.options.report_dir) if self.options.report_dir is not None else None
        if report_dir is None:
            return []
        info = SessionInfo(
            lab=self.lab.name, scenario=f"accept ({self.profile.name})", variants=self.lab.variant_names,
            classes=tuple(c for c in snap.cumulative[next(iter(snap.cumulative))].classes) if snap.cumulative else (),
            simulated=self.engine.simulated, pair={k: str(v) for k, v in self.pair.items()},
            arrival={"stages": list(self.stages), "profile": self.profile.name, "keep_going": self.options.keep_going},
            time_scale=self.ctx.time_scale.s,
        )
        extra = {
            "engine": str(self.engine),
            "profile": self.profile.model_dump(mode="json"),
            "pairing": {"paired": self.pairing.paired, "forced": self.pairing.forced, "reason": self.pairing.reason},
            "forced": self.options.force,
            "gates": [r.to_dict() for r in results],
            "stage_metrics": {r.stage: r.metrics for r in results},
            "variant_tables_from": self.snapshot_from,
            "memory": memory_table(self.ctx.servers) if self.ctx.servers else [],
            "requests_sent": self.ctx.requests_sent,
            "wall_s": round(time.monotonic() - self.started, 3),
            "exit": {"code": int(code), "name": code.name, "reason": reason},
        }
        report = build_report(info, snap, servers=self._server_views(), command="accept", extra=extra)
        paths = write_report(report, report_dir)
        paths.append(write_junit(results, report_dir / "junit.xml"))
        return paths

    def _server_views(self) -> dict[str, ServerView]:
        return {name: server_view(s, log_lines=0) for name, s in self.ctx.servers.items()}


async def run_accept_stages(options: AcceptOptions, out: TextIO = sys.stdout) -> ExitCode:
    """Run the selected stages in order; stop servers and write the reports whatever happens."""
    run = _Run(options, out)
    say = run.ctx.say
    say(run.first_line())
    if run.scale_note:
        say(run.scale_note)
    if run.pairing.forced:
        say(f"warning: {run.pairing.reason}")
    interrupted = catch_interrupts()
    task = asyncio.ensure_future(run.run_stages())
    stop_wait = asyncio.ensure_future(interrupted.wait())
    skipped_reason = "not run: an earlier stage failed"
    try:
        await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            say("interrupted: stopping traffic and servers, writing what was measured")
            await _cancel(task)
            code, reason, skipped_reason = ExitCode.INTERRUPTED, "interrupted", "not run: interrupted"
        else:
            task.result()
            code = run.exit_code()
            failed = [r for r in run.results.values() if not r.passed and not r.skipped]
            reason = "every stage passed" if code == ExitCode.OK else "; ".join(r.summary for r in failed)
    except ServerNotReadyError as error:
        code, reason, skipped_reason = ExitCode.SERVER_NOT_READY, str(error), "not run: a server never became ready"
        say(f"error: {error}")
    except SpeclabError as error:  # a stage that cannot go on: the stages before it are still reported
        code, reason, skipped_reason = error.exit_code, str(error), f"not run: {error}"
        say(f"error: {error}")
    except asyncio.CancelledError:
        try:
            await _cancel(task)
            await run.stop()
            run.write(ExitCode.INTERRUPTED, "cancelled", "not run: cancelled")
            run.ctx.spool.close()
        finally:
            release_interrupts()
        raise
    except BaseException:  # a bug: nothing more is written here
        release_interrupts()
        raise
    finally:
        stop_wait.cancel()
        await run.stop()
    try:  # Ctrl-C stays caught until the report is written: a late one loses nothing
        for path in run.write(code, reason, skipped_reason):
            say(f"report: {path}")
    finally:
        release_interrupts()
    run.ctx.spool.close()
    if options.record_path is not None and CANARY in run.results:
        say(f"recording (canary run): {options.record_path}")
    say(f"exit {int(code)} ({code.name.lower()}): {reason}")
    return code


async def _cancel(task: asyncio.Future[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
