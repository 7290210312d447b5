"""What a live run is made of: its inputs, resolved and checked before any server starts, and the
factories of the collaborators it starts later. This is the session's composition root.

``LiveSession`` is handed its collaborators (the server manager, the traffic runner, one metrics
scraper per server, the aggregator, the recorder, the metrics endpoint and the clock) as ``Collaborators``; the
defaults are the real ones, and a caller that wants another (a test, a driver with its own
clock) replaces one field. ``resolve_inputs`` turns the options into the plan, the lab, the
engine, the pairing, the variants and the scheduled changes, refusing bad input with nothing
launched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.exporter_http import MetricsEndpoint, serve_metrics
from speclab.metrics.scraper import MetricsScraper
from speclab.model.errors import InputError
from speclab.model.lab import Lab
from speclab.model.time_scale import TimeScale
from speclab.model.views import SessionInfo
from speclab.recording.guarded import GuardedWriter
from speclab.servers.engine import EngineChoice, select_engine
from speclab.servers.manager import ServerManager, parse_attach
from speclab.servers.pairing import pair_info, require_pairing
from speclab.traffic.cluster import make_runner
from speclab.traffic.runner import TrafficRunner
from speclab.traffic.schedule import Plan, build_plan

from .options import RunOptions, load_lab_for, load_scenario, parse_headers
from .relaunch import ScheduledChange, check_changes, parse_change
from .time_scale import refuse_for_real_engine, resolve_time_scale

ATTACHED_ENGINE = "attached servers (not launched by speclab)"


@dataclass(frozen=True)
class Collaborators:
    """Factories called with the arguments of the real classes (``Aggregator(variants, classes, ...)``,
    ``ServerManager(lab, engine, ...)``,
    ``make_runner(plan, targets, cluster=..., ...)`` (local workers or Ray actors), ``MetricsScraper(base_url, variant, ...)``,
    ``GuardedWriter(path, manifest, ...)``, ``serve_metrics(port, host, run)``)."""

    aggregator: Callable[..., Aggregator] = Aggregator
    servers: Callable[..., ServerManager] = ServerManager
    traffic: Callable[..., TrafficRunner] = make_runner
    scraper: Callable[..., MetricsScraper] = MetricsScraper
    recorder: Callable[..., GuardedWriter] = GuardedWriter
    metrics: Callable[..., MetricsEndpoint] = serve_metrics
    clock: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class RunInputs:
    """``engine`` is None for attached servers (not launched here: their engine is whatever they are).
    The API key (``--api-key-env``, else the lab's ``server.api_key_env``) protects launched servers
    too; it travels only in the environment of servers and in request headers."""

    lab: Lab | None
    scenario_path: Path
    plan: Plan
    headers: dict[str, str]
    api_key: str | None
    engine: EngineChoice | None
    pair: dict[str, Any]
    variants: tuple[str, ...]
    changes: tuple[ScheduledChange, ...]
    info: SessionInfo
    time_scale: TimeScale

    @property
    def engine_label(self) -> str:
        return str(self.engine) if self.engine else ATTACHED_ENGINE


def resolve_inputs(options: RunOptions, *, plan: Plan | None = None, lab: Lab | None = None) -> RunInputs:
    """``plan`` and ``lab`` replace the scenario's (``replay --refire`` fires a recorded plan)."""
    if plan is None:
        scenario, scenario_path = load_scenario(options.scenario)
        lab = lab or load_lab_for(options, scenario, scenario_path)
        plan = build_plan(scenario, duration_s=options.duration, requests=options.requests, rate=options.rate,
                          concurrency=options.concurrency, seed=options.seed)
    else:
        scenario_path = Path(options.scenario)
    key_env = options.api_key_env or (lab.server.api_key_env if lab is not None else None)
    headers, api_key = parse_headers(options.headers, key_env)
    refuse_for_real_engine(options.time_scale, options.engine)
    engine = select_engine(options.engine) if lab else None
    pair = pair_info(lab, require_pairing(lab, force=options.force)) if lab is not None else {}
    variants = variant_names(options, lab)
    # One S for every simulator of the run; the plan stays modelled, the workers get it in wall time.
    time_scale = resolve_time_scale(options.time_scale, engine=engine.engine if engine else None, lab=lab,
                                    variants=variants, plan=plan, sequential=options.sequential)
    changes = tuple(parse_change(spec) for spec in options.changes)
    check_changes(changes, lab, variants)
    info = SessionInfo(
        lab=lab.name if lab else "attached", scenario=plan.name, variants=variants,
        classes=tuple(c.name for c in plan.classes), simulated=bool(engine and engine.simulated),
        pair={k: str(v) for k, v in pair.items()}, arrival=arrival_facts(options, plan),
        time_scale=time_scale.s,
    )
    return RunInputs(lab=lab, scenario_path=scenario_path, plan=plan, headers=headers, api_key=api_key,
                     engine=engine, pair=pair, variants=variants, changes=changes, info=info, time_scale=time_scale)


def variant_names(options: RunOptions, lab: Lab | None) -> tuple[str, ...]:
    if lab is None:
        labels = tuple(parse_attach(spec)[0] for spec in options.attach)
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise InputError(f"--attach: label {', '.join(repeated)} given twice; each server needs its own "
                             "(LABEL=http://HOST:PORT)")
        return labels
    names = lab.variant_names
    if options.variants:
        unknown = [v for v in options.variants if v not in names]
        if unknown:
            raise InputError(f"--variants: lab {lab.name!r} has no variant {', '.join(unknown)} "
                             f"(it has {', '.join(names)})")
        names = tuple(v for v in names if v in options.variants)
    return names


def arrival_facts(options: RunOptions, plan: Plan) -> dict[str, Any]:
    facts: dict[str, Any] = {"mode": plan.mode, "process": plan.process}
    # A steady load first (the status line is cut at its end): the app's dialogs start from it.
    if plan.mode == "open" and len(plan.segments) == 1 and not plan.segments[0].slope:
        facts["rate"] = plan.segments[0].rate
    if plan.mode == "closed" and len(plan.concurrency_steps) == 1:
        facts["concurrency"] = plan.concurrency_steps[0][1]
    facts["variants"] = "sequential" if options.sequential else "concurrent"
    facts.update(plan.overrides)
    if plan.duration_s is not None:
        facts["duration_s"] = plan.duration_s
    if plan.requests is not None:
        facts["requests"] = plan.requests
    return facts
