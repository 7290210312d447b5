"""`speclab drill LAB [SCENARIO]`: the rollback drill through a real HAProxy gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from .base import _guard
from .options import (
    cluster_options,
    cluster_settings,
    engine_option,
    metrics_options,
    metrics_settings,
    time_scale_option,
)


@click.command()
@click.argument("lab_name", metavar="LAB")
@click.argument("scenario", required=False, default=None, metavar="[SCENARIO]")
@click.option("--quick", is_flag=True,
              help="the short drill: 45 s of traffic, the canary switched at 8 s, rolled back at 28 s")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
              help="report directory (default: ./drill-LAB); it also gets haproxy.cfg, maps and gateway-api.yaml")
@engine_option()
@click.option("--duration", type=float, default=None, help="seconds of traffic (default: the scenario's)")
@click.option("--switch-at", type=float, default=None, help="seconds after traffic starts: the canary tenant moves")
@click.option("--rollback-at", type=float, default=None,
              help="seconds after traffic starts: roll back (with --trigger: at the latest)")
@click.option("--trigger", "triggers", multiple=True, metavar="METRIC>THRESHOLD",
              help="roll back when rejection>PCT, structured>PCT or p99>MS holds for --trigger-intervals (repeatable)")
@click.option("--trigger-intervals", type=int, default=3, show_default=True,
              help="consecutive 1 s intervals a trigger must hold")
@click.option("--canary-tenant", default=None, help="the tenant switched to the speculative pool (default: the lab's)")
@click.option("--control-tenant", default=None, help="the tenant that stays on the baseline (default: the lab's)")
@click.option("--pool", default=None, help="the speculative variant the canary tenant moves to")
@click.option("--rate", type=float, default=None, help="open-loop requests/s (both tenants together)")
@click.option("--seed", type=int, default=None)
@click.option("--haproxy", "haproxy_bin", default=None, help="haproxy executable (default: haproxy on PATH)")
@click.option("--force", is_flag=True, help="write over a previous drill's report")
@metrics_options
@cluster_options
@time_scale_option
def drill(lab_name: str, scenario: str | None, **opts: Any) -> None:
    """Switch a canary tenant to the speculative pool behind HAProxy, roll back, measure the flip."""
    from speclab.headless.drill import drill_command
    from speclab.model.time_scale import parse_time_scale
    from speclab.session.drill_plan import DrillOptions

    def body() -> int:
        options = DrillOptions(
            lab=lab_name, scenario=scenario, quick=bool(opts["quick"]), report_dir=opts.get("report_dir"),
            engine=opts.get("engine") or "auto", duration=opts.get("duration"), switch_at=opts.get("switch_at"),
            rollback_at=opts.get("rollback_at"), triggers=tuple(opts.get("triggers") or ()),
            trigger_intervals=int(opts["trigger_intervals"]), canary_tenant=opts.get("canary_tenant"),
            control_tenant=opts.get("control_tenant"), pool=opts.get("pool"), rate=opts.get("rate"),
            seed=opts.get("seed"), haproxy=opts.get("haproxy_bin"), force=bool(opts.get("force")),
            time_scale=parse_time_scale(opts.get("time_scale")),
            **metrics_settings(opts),
            **cluster_settings(opts),
        )
        return int(asyncio.run(drill_command(options)))

    _guard(body)
