"""The load stages of `speclab accept`: single-stream latency curve, concurrency stress, canary.

Each fires the canary scenario's prompt classes through the traffic runner (worker process,
identical schedule and seeds for every variant, concurrently) and summarises the run with the
aggregator, exactly as `speclab run` does; the gates then compare each variant with the baseline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from speclab.gates.canary import CanaryTally, evaluate_canary
from speclab.gates.latency import (
    BusySpans,
    LatencyPoint,
    StressSummary,
    as_point,
    evaluate_latency_curve,
    evaluate_stress,
)
from speclab.gates.result import StageResult
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.interval_spill import SpilledIntervalStore
from speclab.model.names import INTERVAL_S, Metric
from speclab.model.records import RequestRecord
from speclab.model.snapshot import Snapshot
from speclab.recording.writer import RecordingWriter
from speclab.traffic.cluster import make_runner
from speclab.traffic.schedule import Plan, build_plan
from speclab.traffic.wall_plan import wall_plan

from .accept_context import STAGE_CLOSE_DELAY_S, STAGE_RETAIN_INTERVALS, AcceptContext, RecordSink
from .accept_gateway import DRAIN_ON_CANCEL_S, gateway_canary_configured, gateway_canary_stage
from .canary_recording import canary_recorder


async def measure(
    ctx: AcceptContext, plan: Plan, label: str, recorder: RecordingWriter | None = None,
    *, sinks: Sequence[RecordSink] = (),
) -> Snapshot:
    """Fire ``plan`` at every variant and return the final snapshot. Records stream to the
    aggregator, the recording, the context and each of the stage's ``sinks`` (its gates'
    accumulators); none is kept."""
    classes = [c.name for c in plan.classes]
    aggregator = Aggregator(ctx.variants, classes, interval_s=INTERVAL_S, simulated=ctx.engine.simulated, warmup_s=0.0,
                            close_delay_s=STAGE_CLOSE_DELAY_S,
                            retain_intervals=STAGE_RETAIN_INTERVALS, store=SpilledIntervalStore())
    scale, clock = ctx.time_scale, ctx.clock
    run_start = clock()

    def on_records(records: list[RequestRecord]) -> None:
        scale.ingest(records)  # wall -> modelled seconds
        aggregator.add_records(records)
        aggregator.tick(scale.to_model(clock() - run_start))
        if recorder is not None:
            recorder.write_records(records)
            recorder.write_closed_intervals(aggregator)
        ctx.add_records(records)
        for sink in sinks:
            sink.add(records)

    runner = make_runner(wall_plan(plan, scale.s), ctx.targets, cluster=ctx.cluster, workers=ctx.workers,
                         run_start=run_start, on_records=on_records, health_interval_s=scale.to_wall(INTERVAL_S))
    try:
        await runner.start()
        summary = await runner.finished
    except asyncio.CancelledError:
        await runner.stop(scale.to_wall(DRAIN_ON_CANCEL_S))
        if recorder is not None:
            recorder.close({"status": "interrupted"}, end_s=scale.to_model(clock() - run_start))
        raise
    now = scale.to_model(clock() - run_start)
    snap = aggregator.snapshot(now, finished=True)
    if recorder is not None:
        recorder.write_closed_intervals(aggregator)
        recorder.close({"status": "complete"}, end_s=now)
    for error in summary.errors:
        ctx.say(f"  {label}: traffic: {error}")
    return snap


def load_plan(ctx: AcceptContext, *, requests: int, concurrency: int | None = None, rate: float | None = None) -> Plan:
    scenario = ctx.canary_scenario.model_copy(update={"warmup_s": 0.0, "warmup_requests": 0})
    return build_plan(scenario, requests=requests, concurrency=concurrency, rate=rate, seed=ctx.seed)


def _e2e(snap: Snapshot, variant: str) -> LatencyPoint | None:
    """Closed-loop e2e from the intended send time (the moment the slot freed): the corrected view."""
    stats = snap.cumulative.get(variant)
    pct = stats.total.latency.get(Metric.E2E_CORRECTED.value) if stats is not None else None
    return as_point(pct) if pct is not None else None


async def latency_stage(ctx: AcceptContext) -> tuple[StageResult, Snapshot | None]:
    settings = ctx.profile.latency
    curve: dict[str, dict[int, LatencyPoint]] = {v: {} for v in ctx.variants}
    snap: Snapshot | None = None
    for level in settings.concurrency:
        snap = await measure(ctx, load_plan(ctx, requests=settings.requests_per_level, concurrency=level),
                             f"latency concurrency {level}")
        parts = []
        for v in ctx.variants:
            point = _e2e(snap, v)
            if point is not None:
                curve[v][level] = point
                parts.append(f"{v} p50 {point.p50_us / 1000:.0f}ms p99 {point.p99_us / 1000:.0f}ms")
        ctx.say(f"  latency curve: concurrency {level}: " + ", ".join(parts))
    result = evaluate_latency_curve(settings, ctx.baseline, curve)
    result.metrics["curve_ms"] = {
        v: {str(level): {"p50_ms": p.p50_us / 1000, "p99_ms": p.p99_us / 1000, "count": p.count}
            for level, p in levels.items()}
        for v, levels in curve.items()
    }
    return result, snap


async def stress_stage(ctx: AcceptContext) -> tuple[StageResult, Snapshot]:
    settings = ctx.profile.stress
    spans = BusySpans()
    snap = await measure(ctx, load_plan(ctx, requests=settings.requests, concurrency=settings.concurrency),
                         "stress", sinks=[spans])
    summaries: dict[str, StressSummary] = {}
    for v in ctx.variants:
        if v in snap.cumulative:
            point = _e2e(snap, v)
            summary = StressSummary.from_variant_stats(snap.cumulative[v])
            summaries[v] = replace(
                summary, p99_e2e_us=point.p99_us if point is not None else summary.p99_e2e_us,
                throughput=spans.throughput(v),
            )
    result = evaluate_stress(settings, ctx.profile.acceptance, ctx.baseline, summaries)
    result.metrics["summaries"] = {
        v: {"p99_e2e_ms": s.p99_e2e_us / 1000, "output_tokens_per_s": s.throughput, "requests": s.requests,
            "errors": s.errors}
        for v, s in summaries.items()
    }
    return result, snap


async def canary_stage(ctx: AcceptContext) -> tuple[StageResult, Snapshot]:
    if gateway_canary_configured(ctx.lab):
        return await gateway_canary_stage(ctx)
    settings = ctx.profile.canary
    plan = load_plan(ctx, requests=settings.requests, rate=settings.rate)
    tally = CanaryTally(INTERVAL_S)
    snap = await measure(ctx, plan, "canary", canary_recorder(ctx, plan), sinks=[tally])
    result = evaluate_canary(settings, ctx.profile.acceptance, ctx.baseline, tally, INTERVAL_S)
    result.metrics["requests_per_variant"] = settings.requests
    return result, snap
