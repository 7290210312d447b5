"""What a drill will do, resolved and checked before anything starts (bad input is exit 2 here).

The gateway serves the baseline and one speculative pool. Every tenant and route of the lab
starts on the baseline; the two drill tenants share the scenario's traffic request by request
(``traffic.tenants``). At ``switch_at`` the canary tenant moves to the speculative pool; at
``rollback_at``, or when a trigger fires after the switch, everything rolls back; traffic runs on
to ``duration``. Times are seconds after traffic starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from speclab.gates.triggers import Trigger, parse_trigger
from speclab.gateway.routing import RoutingTable
from speclab.model.errors import InputError
from speclab.model.lab import Lab, load_lab
from speclab.model.scenario import Scenario, load_scenario
from speclab.servers.backends import AUTO, EngineRequest
from speclab.traffic.schedule import build_plan
from speclab.traffic.tenants import TenantSplitPlan, split_among_tenants

QUICK_DURATION_S, QUICK_SWITCH_S, QUICK_ROLLBACK_S = 45.0, 8.0, 28.0
QUICK_SCENARIO = "mixed"
DEFAULT_CONTROL, DEFAULT_CANARY = "A", "B"


@dataclass(frozen=True)
class DrillOptions:
    lab: str
    scenario: str | None = None  # None: the bundled mixed scenario
    quick: bool = False
    report_dir: str | Path | None = None
    engine: EngineRequest = AUTO
    duration: float | None = None
    switch_at: float | None = None
    rollback_at: float | None = None
    triggers: tuple[str, ...] = ()
    trigger_intervals: int = 3
    canary_tenant: str | None = None
    control_tenant: str | None = None
    pool: str | None = None
    rate: float | None = None
    seed: int | None = None
    haproxy: str | None = None
    force: bool = False
    metrics_port: int | None = None  # --metrics-port: speclab's own series per backend during the drill
    metrics_host: str = "127.0.0.1"
    metrics_hold_s: float = 0.0
    workers: int | None = 1  # None: one per CPU of the cluster
    cluster: str | None = None  # --cluster: the drill's traffic workers on this Ray cluster
    time_scale: float | None = None  # --time-scale S; None: auto (the simulators' S, from the load)


@dataclass(frozen=True)
class DrillPlan:
    lab: Lab
    scenario: Scenario
    plan: TenantSplitPlan
    routing: RoutingTable
    canary: str
    control: str
    pool: str
    duration_s: float
    switch_at: float
    rollback_at: float
    triggers: tuple[Trigger, ...]
    trigger_intervals: int
    report_dir: Path
    workers: int | None = 1
    cluster: str | None = None

    @property
    def speculative(self) -> tuple[str, ...]:
        return (self.pool,)

    def facts(self) -> dict[str, object]:
        return {"canary_tenant": self.canary, "control_tenant": self.control, "pool": self.pool,
                "baseline": self.routing.baseline, "duration_s": self.duration_s, "switch_at_s": self.switch_at,
                "rollback_at_s": self.rollback_at, "triggers": [t.spec for t in self.triggers],
                "trigger_intervals": self.trigger_intervals, "tenant_header": self.routing.tenant_header}


def _tenants(lab: Lab, options: DrillOptions) -> tuple[str, str, str]:
    """(canary tenant, control tenant, speculative pool) from the options, else the lab's [gateway]."""
    section = lab.gateway.tenants
    speculative = tuple(v for v in lab.variant_names if v != lab.baseline)
    if not speculative:
        raise InputError(f"drill: lab {lab.name!r} has no speculative variant to canary")
    canary = options.canary_tenant or next((t for t, p in section.items() if p in speculative), DEFAULT_CANARY)
    pool = options.pool or (section[canary] if section.get(canary) in speculative else speculative[-1])
    if pool not in speculative:
        raise InputError(f"drill: --pool {pool!r}: not a speculative variant of lab {lab.name!r} "
                         f"(speculative: {', '.join(speculative)})")
    control = options.control_tenant or next((t for t in section if t != canary),
                                             DEFAULT_CONTROL if canary != DEFAULT_CONTROL else DEFAULT_CANARY)
    if control == canary:
        raise InputError(f"drill: the canary and control tenants must differ (both {canary!r})")
    return canary, control, pool


def _times(options: DrillOptions, scenario: Scenario) -> tuple[float, float, float]:
    if options.quick:
        duration = QUICK_DURATION_S if options.duration is None else options.duration
        switch = QUICK_SWITCH_S if options.switch_at is None else options.switch_at
        rollback = QUICK_ROLLBACK_S if options.rollback_at is None else options.rollback_at
    else:
        duration_opt = scenario.duration_s if options.duration is None else options.duration
        if duration_opt is None:
            raise InputError(f"drill: scenario {scenario.name!r} has no duration; give --duration S")
        duration = float(duration_opt)
        switch = max(scenario.warmup_s, 0.25 * duration) if options.switch_at is None else options.switch_at
        rollback = 0.6 * duration if options.rollback_at is None else options.rollback_at
    if not duration > 0:
        raise InputError(f"drill: --duration {duration:g}: expected a number greater than 0")
    if switch < scenario.warmup_s:
        raise InputError(f"drill: --switch-at {switch:g} s is inside the scenario's {scenario.warmup_s:g} s warm-up")
    if not switch < rollback < duration:
        raise InputError(f"drill: expected --switch-at ({switch:g} s) < --rollback-at ({rollback:g} s) < "
                         f"--duration ({duration:g} s)")
    return duration, switch, rollback


def resolve(options: DrillOptions) -> DrillPlan:
    lab = load_lab(options.lab)
    scenario = load_scenario(options.scenario or QUICK_SCENARIO)
    canary, control, pool = _tenants(lab, options)
    duration, switch, rollback = _times(options, scenario)
    triggers = tuple(parse_trigger(t) for t in options.triggers)
    if options.trigger_intervals < 1:
        raise InputError(f"drill: --trigger-intervals {options.trigger_intervals}: expected at least 1")
    on_baseline = {t: lab.baseline for t in (*lab.gateway.tenants, control, canary)}
    routing = RoutingTable(variants=(lab.baseline, pool), baseline=lab.baseline,
                           tenant_header=lab.gateway.tenant_header, tenants=on_baseline,
                           routes=dict.fromkeys(lab.gateway.routes, lab.baseline), shares={})
    routing.check()
    base = build_plan(scenario, duration_s=duration, rate=options.rate, seed=options.seed)
    plan = split_among_tenants(base, (control, canary), routing.tenant_header)
    report_dir = Path(options.report_dir or f"drill-{lab.name}")
    if (report_dir / "report.json").exists() and not options.force:
        raise InputError(f"drill: {report_dir}/report.json exists; use another --report directory or --force")
    return DrillPlan(lab=lab, scenario=scenario, plan=plan, routing=routing, canary=canary, control=control,
                     pool=pool, duration_s=duration, switch_at=switch, rollback_at=rollback, triggers=triggers,
                     trigger_intervals=options.trigger_intervals, report_dir=report_dir,
                     workers=options.workers, cluster=options.cluster)
