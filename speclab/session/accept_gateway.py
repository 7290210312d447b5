"""The canary stage of `speclab accept` through a gateway, when the lab configures one.

A lab configures a gateway canary when its ``[gateway]`` gives a speculative pool a share
(``weights = { k4 = 10 }``). Then the canary does what production would: HAProxy starts in front of
the servers accept already runs, with every share at 0; the shares are set live (an event, the
change spikes are measured from); the canary scenario's traffic goes to the gateway as the lab's
tenants that take the canary pool (untagged when none does), so only the configured share reaches
the speculative pool. Records are judged per backend that answered: the canary gate as without a
gateway, plus structured-output failures (samples kept), p99 against the plain pool and every
spike linked to the nearest change before it. HAProxy stops when the stage ends; the servers are
accept's. The configuration and manifests stay in ``<report>/gateway`` when there is a report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from speclab.gates.canary import CanaryTally, evaluate_canary
from speclab.gates.canary_watch import CanaryWatchTally, watch_canary
from speclab.gates.result import StageResult
from speclab.gateway.config import find_haproxy
from speclab.gateway.launch import gateway_for
from speclab.gateway.routing import RoutingTable
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.interval_spill import SpilledIntervalStore
from speclab.model.gateway import CANARY
from speclab.model.lab import Lab
from speclab.model.names import INTERVAL_S
from speclab.model.records import Event, RequestRecord
from speclab.model.snapshot import Snapshot
from speclab.recording.writer import RecordingWriter
from speclab.traffic.client import Target
from speclab.traffic.cluster import make_runner
from speclab.traffic.schedule import build_plan
from speclab.traffic.tenants import split_among_tenants
from speclab.traffic.wall_plan import wall_plan

from .accept_context import STAGE_CLOSE_DELAY_S, STAGE_RETAIN_INTERVALS, AcceptContext
from .canary_recording import canary_recorder

WHO = "speclab accept (canary)"
# Every load stage (here and in accept_load) lets in-flight requests drain this long (modelled
# seconds: stretched by the simulators' time scale) when cancelled, then cancels them.
DRAIN_ON_CANCEL_S = 1.0


def gateway_canary_configured(lab: Lab) -> bool:
    return any(pct > 0 for pool, pct in lab.gateway.weights.items() if pool != lab.baseline)


async def gateway_canary_stage(ctx: AcceptContext) -> tuple[StageResult, Snapshot]:
    settings = ctx.profile.canary
    lab = ctx.lab
    haproxy = find_haproxy()
    shares = {p: pct for p, pct in lab.gateway.weights.items() if pct > 0}
    start = RoutingTable.from_lab(lab, shares=dict.fromkeys(shares, 0))
    report_dir = ctx.gateway_dir
    directory = Path(report_dir) if report_dir is not None else Path(tempfile.mkdtemp(prefix="speclab-canary-gw-"))
    gw = await gateway_for(lab, start, ctx.servers, directory=directory, haproxy=haproxy)
    events: list[Event] = []
    scenario = ctx.canary_scenario.model_copy(update={"warmup_s": 0.0, "warmup_requests": 0})
    plan = build_plan(scenario, requests=settings.requests * len(ctx.variants), rate=settings.rate, seed=ctx.seed)
    # Records are judged per backend that answered (their variant here), as they stream past.
    agg = Aggregator(list(ctx.variants), [c.name for c in plan.classes], interval_s=INTERVAL_S,
                     simulated=ctx.engine.simulated, close_delay_s=STAGE_CLOSE_DELAY_S,
                     retain_intervals=STAGE_RETAIN_INTERVALS, store=SpilledIntervalStore())
    tally, watched, backends = CanaryTally(INTERVAL_S), CanaryWatchTally(ctx.baseline), Counter[str]()
    scale, clock = ctx.time_scale, ctx.clock
    recorder: RecordingWriter | None = None
    run_start = clock()

    def model_now() -> float:
        return scale.to_model(clock() - run_start)

    def on_records(records: list[RequestRecord]) -> None:
        scale.ingest(records)  # wall -> modelled seconds
        relabelled = [dataclasses.replace(r, variant=r.backend or "unrouted") for r in records]
        ctx.add_records(relabelled)
        agg.add_records(relabelled)
        agg.tick(model_now())
        if recorder is not None:
            recorder.write_records(relabelled)
            recorder.write_closed_intervals(agg)
        tally.add(relabelled)
        watched.add(relabelled)
        backends.update(r.variant for r in relabelled)

    try:
        controller = await gw.controller(clock=model_now, sinks=[events.append])
        try:
            change = await controller.weight(shares, who=WHO)
        finally:
            await controller.close()
        ctx.say(f"  canary: through HAProxy {gw.state.haproxy_version} at {gw.url}: {change.message}")
        tenants = tuple(t for t, pool in lab.gateway.tenants.items() if pool == CANARY)
        if tenants:
            plan = split_among_tenants(plan, tenants, lab.gateway.tenant_header)
        baseline = ctx.servers[lab.baseline]
        target = Target(variant="gateway", base_url=gw.url, model=baseline.model_name or "",
                        headers=dict(baseline.headers))
        # The same runner as the other load stages: the plan in wall time under the simulators' S, on
        # --workers local processes or on --cluster, recorded with --record.
        runner = make_runner(wall_plan(plan, scale.s), {"gateway": target}, cluster=ctx.cluster, workers=ctx.workers,
                             run_start=run_start, on_records=on_records, health_interval_s=scale.to_wall(INTERVAL_S))
        recorder = canary_recorder(ctx, plan, command="accept (canary through the gateway)")
        try:
            await runner.start()
            summary = await runner.finished
        except asyncio.CancelledError:
            await runner.stop(scale.to_wall(DRAIN_ON_CANCEL_S))
            if recorder is not None:
                recorder.close({"status": "interrupted"}, end_s=model_now())
            raise
        for error in summary.errors:
            ctx.say(f"  canary: traffic: {error}")
    finally:
        await gw.stop()
        gw.files.socket.unlink(missing_ok=True)
        if report_dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    now = model_now()
    if recorder is not None:
        recorder.write_closed_intervals(agg)
        recorder.close({"status": "complete"}, end_s=now)
    result = evaluate_canary(settings, ctx.profile.acceptance, ctx.baseline, tally, INTERVAL_S)
    watch = watch_canary(watched, ctx.baseline, events, max_structured_pct=ctx.profile.structured.max_failure_rate_pct,
                         max_p99_ratio=ctx.profile.latency.max_p99_ratio, max_spike_points=settings.max_spike_points,
                         min_interval_drafted=settings.min_interval_drafted)
    failures = [d.removeprefix("FAIL ") for d in result.details if d.startswith("FAIL ")] + watch.failures
    details = [d for d in result.details if not d.startswith("FAIL ")] + watch.details
    headline = (f"canary through the gateway ({', '.join(f'{p} {v}%' for p, v in shares.items())}): "
               + (f"{len(failures)} problems" if failures else "within limits for every class"))
    result = StageResult.of(result.stage, failures, headline, details,
                            {**result.metrics, **watch.metrics, "through_gateway": True,
                             "shares": shares, "tenants": list(tenants),
                             "backends": dict(backends), "changes": [e.to_dict() for e in events],
                             "gateway_dir": str(directory) if report_dir is not None else None})
    return result, agg.snapshot(now, finished=True)
