"""`speclab sweep LAB [SCENARIO]`: the draft-length and batch grid over a load ladder.

Lists are comma-separated (``--k 0,2,4``, ``--concurrency 1,8,32``, ``--chunked-prefill on,off``);
``--schedule`` (repeatable) takes vLLM's per-batch form as ``START-END:K,...``. Everything is
validated before a server starts: a bad grid is one line naming the field, exit 2.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from speclab.model.time_scale import parse_time_scale
from speclab.servers.backends import EngineRequest

from .base import _guard, require_terminal
from .options import (
    cluster_options,
    cluster_settings,
    engine_option,
    metrics_options,
    metrics_settings,
    time_scale_option,
)

QUICK_K = "0,2,4"
QUICK_CELL_S = 5.0
QUICK_WARMUP_S = 1.0
DEFAULT_CELL_S = 20.0
DEFAULT_WARMUP_S = 3.0


@dataclass(frozen=True)
class SweepArgs:
    lab: str
    scenario: str
    report_dir: Path | None
    k: str | None
    schedules: tuple[str, ...]
    max_num_seqs: str | None
    max_num_batched_tokens: str | None
    chunked_prefill: str | None
    concurrency: str | None
    rate: str | None
    repeats: int
    warmup: float | None
    min_requests: int
    slo: str | None
    tie_tolerance: float
    cell_duration: float | None
    quick: bool
    confirm: bool
    resume: bool
    force: bool
    engine: EngineRequest
    seed: int | None
    workers: int | str | None
    cluster: str | None
    app: bool
    time_scale: str = "auto"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_hold_s: float = 0.0


def ladder(top: int, points: int) -> list[int]:
    """``points`` concurrency levels from 1 to ``top``, evenly spaced on a log scale."""
    if top <= 1 or points <= 1:
        return [max(1, top)]
    out = sorted({max(1, round(math.exp(math.log(top) * i / (points - 1)))) for i in range(points)})
    return out


def lab_ks(lab: Any) -> str:
    """The lab's own k values with k = 0: what a sweep compares when no --k is given."""
    ks = sorted({0, *(v.num_speculative_tokens for v in lab.variants if v.speculative and v.num_speculative_tokens)})
    return ",".join(str(k) for k in ks)


def sweep_setup(args: SweepArgs) -> Any:
    from speclab.model.lab import load_lab
    from speclab.session.sweep import SweepSetup
    from speclab.sweep import make_grid, parse_list, parse_schedule, rules_for_lab, schedule_option

    lab = load_lab(args.lab)
    seqs = lab.effective(lab.baseline).max_num_seqs or 256
    concurrency, rate = args.concurrency, args.rate
    if concurrency is None and rate is None:
        concurrency = ",".join(str(c) for c in ladder(seqs, 3 if args.quick else 4))
    k = args.k if args.k is not None else (QUICK_K if args.quick else lab_ks(lab))
    grid = make_grid(
        parse_list(k, "--k"),
        rules=rules_for_lab(lab),
        schedules=[parse_schedule(s, schedule_option(i, len(args.schedules))) for i, s in enumerate(args.schedules)],
        max_num_seqs=parse_list(args.max_num_seqs, "--max-num-seqs") or None,
        max_num_batched_tokens=parse_list(args.max_num_batched_tokens, "--max-num-batched-tokens") or None,
        chunked_prefill=parse_list(args.chunked_prefill, "--chunked-prefill", bool) or None,
        concurrency=parse_list(concurrency, "--concurrency") if concurrency is not None else None,
        rate=parse_list(rate, "--rate", float) if rate is not None else None,
        repeats=args.repeats,
        warmup_s=args.warmup if args.warmup is not None else (QUICK_WARMUP_S if args.quick else DEFAULT_WARMUP_S),
        min_requests=args.min_requests,
        slo=args.slo,
        tie_tolerance=args.tie_tolerance,
    )
    cell_s = args.cell_duration if args.cell_duration is not None else (QUICK_CELL_S if args.quick else DEFAULT_CELL_S)
    directory = args.report_dir or Path(f"sweep-{lab.name}")
    return SweepSetup(lab=lab, scenario=args.scenario, grid=grid, directory=directory, cell_s=cell_s,
                      engine=args.engine, seed=args.seed, force=args.force, resume=args.resume,
                      confirm=args.confirm, confirm_fixed_from_grid=args.quick, time_scale=parse_time_scale(args.time_scale),
                      **metrics_settings(asdict(args)), **cluster_settings({"workers": args.workers, "cluster": args.cluster}))


def run_sweep_command(args: SweepArgs) -> int:
    from speclab.headless.sweep import run_sweep

    if args.app:
        return run_sweep_app(sweep_setup(args))
    return int(asyncio.run(run_sweep(sweep_setup(args))))


def run_sweep_app(setup: Any) -> int:
    from speclab.headless.sweep import cell_report
    from speclab.model.exit_codes import ExitCode
    from speclab.sweep.lines import crossover_lines
    from speclab.ui.sweep_app import SweepApp

    require_terminal("sweep", "drop --app to run it headless")
    app = SweepApp(setup, cell_report)
    try:
        app.run()
    finally:
        app.driver.close_metrics()
    if app.outcome is None:
        return int(app.return_code or ExitCode.INTERNAL_ERROR)
    for line in crossover_lines(app.outcome.result):
        click.echo(line)
    click.echo(f"sweep: {', '.join(str(p) for p in app.outcome.written)}")
    click.echo(f"exit {int(app.outcome.code)} ({app.outcome.code.name.lower()}): {app.outcome.reason}")
    return int(app.outcome.code)


@click.command("sweep")
@click.argument("lab_name", metavar="LAB")
@click.argument("scenario", required=False, default="mixed", metavar="[SCENARIO]")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
              help="the sweep directory (default: ./sweep-LAB)")
@click.option("--k", default=None, help="draft lengths, e.g. 0,2,4 (k=0 is always added; default: the lab's)")
@click.option("--schedule", "schedules", multiple=True, metavar="START-END:K,...",
              help="a per-batch-size k schedule arm, vLLM's num_speculative_tokens_per_batch_size (repeatable)")
@click.option("--max-num-seqs", default=None, help="values of max_num_seqs, e.g. 64,256 (default: the lab's)")
@click.option("--max-num-batched-tokens", default=None, help="values of max_num_batched_tokens")
@click.option("--chunked-prefill", default=None, help="on, off or on,off (default: the lab's)")
@click.option("--concurrency", default=None, help="closed-loop load ladder, e.g. 1,8,32,64")
@click.option("--rate", default=None, help="open-loop load ladder in requests/s, e.g. 2,8,16")
@click.option("--repeats", type=int, default=1, show_default=True, help="runs of every cell (their spread is the noise)")
@click.option("--warmup", type=float, default=None, help="warm-up seconds per cell, not measured (default 3, quick 1)")
@click.option("--min-requests", type=int, default=1, show_default=True,
              help="requests per class a cell needs; it runs on (up to 3x) until it has them")
@click.option("--slo", default=None, help="goodput SLOs, e.g. ttft_p99=200ms,tpot_p99=40ms")
@click.option("--tie-tolerance", type=float, default=0.01, show_default=True,
              help="medians closer than this fraction are a tie")
@click.option("--cell-duration", type=float, default=None, help="measured seconds per cell (default 20, quick 5)")
@click.option("--quick", is_flag=True, help="k 0,2,4 x three levels from 1 to max_num_seqs, short cells")
@click.option("--confirm/--no-confirm", default=True, show_default=True,
              help="run the recommended schedule against the best fixed k and k=0 afterwards")
@click.option("--resume", is_flag=True, help="continue the sweep in --report DIR, skipping finished cells")
@click.option("--force", is_flag=True, help="start over in a directory that holds a sweep; run an unpaired lab")
@engine_option()
@click.option("--seed", type=int, default=None, help="the traffic's seed (default: the scenario's)")
@cluster_options
@click.option("--app", is_flag=True, help="show the sweep in the terminal app: a heat map of speed-up per k x load")
@time_scale_option
@metrics_options
def sweep(lab_name: str, scenario: str, **opts: Any) -> None:
    """Sweep draft lengths (and batch settings) of LAB over a load ladder of SCENARIO (default: mixed)."""
    args = SweepArgs(lab=lab_name, scenario=scenario, **opts)
    _guard(lambda: run_sweep_command(args))
