"""Options shared by `run`, `lab` and `replay --refire` (docs/file-formats.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from speclab.model.limits import MAX_WORKERS, auto_workers, check_option
from speclab.servers.backends import AUTO, engine_choices, engine_request


class WorkersType(click.ParamType):  # type: ignore[type-arg]
    """``--workers N`` or ``--workers auto`` (what the host's cores allow, ``auto_workers``; on a
    Ray cluster, one per CPU it has)."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        if str(value).strip().lower() == AUTO_WORKERS:
            return AUTO_WORKERS  # resolved by cluster_settings: this host's share, or the cluster's CPUs
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number of workers nor 'auto'", param, ctx)


WORKERS = WorkersType()
AUTO_WORKERS = "auto"

F = TypeVar("F", bound=Callable[..., Any])


class EngineChoice(click.Choice):  # type: ignore[type-arg]
    """The registry's engines as choices; the value reaches the command as an ``EngineRequest``."""

    def __init__(self) -> None:
        super().__init__(engine_choices())

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return engine_request(super().convert(value, param, ctx))


def engine_option() -> Callable[[F], F]:
    """``--engine``: ``auto`` or an engine of the backend registry (speclab/servers/backends)."""
    return click.option("--engine", type=EngineChoice(), default=AUTO, show_default=True)


def run_options(fn: F) -> F:
    options = [
        click.option("--lab", "lab_name_opt", default=None, help="lab file or bundled lab name"),
        engine_option(),
        click.option("--record", "record_path", type=click.Path(path_type=Path), default=None,
                     help="record the run here (a directory; replay it with `speclab replay`)"),
        click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
                     help="directory for report.json and report.md"),
        click.option("--duration", type=float, default=None, help="seconds of traffic"),
        click.option("--requests", type=int, default=None, help="number of requests"),
        click.option("--rate", type=float, default=None, help="open-loop requests/s"),
        click.option("--concurrency", type=int, default=None, help="closed loop: requests in flight"),
        click.option("--seed", type=int, default=None),
        click.option("--sequential", is_flag=True, help="run variants one after another"),
        click.option("--variants", default=None, help="comma-separated subset of the lab's variants"),
        click.option("--force", is_flag=True, help="overwrite a recording; run an unpaired lab"),
        click.option("--change", "changes", multiple=True, metavar="AT:VARIANT:KEY=VALUE[,KEY=VALUE]",
                     help="at AT s after traffic starts, relaunch VARIANT with these settings (repeatable)"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return time_scale_option(metrics_options(cluster_options(fn)))


def time_scale_option(fn: F) -> F:
    """``--time-scale S|auto``, for every command that starts simulators (run, lab, accept, sweep, drill)."""
    return click.option(
        "--time-scale", "time_scale", default="auto", show_default=True, metavar="S|auto",
        help="run the simulators' modelled clock S (>= 1) times slower than wall time; auto: the smallest "
             "S this host keeps up at for the planned load (1 for light runs); figures stay in modelled time",
    )(fn)


def cluster_options(fn: F) -> F:
    """``--workers`` and ``--cluster``, one option object for run, lab, accept, sweep and drill."""
    options = [
        click.option("--workers", type=WORKERS, default="auto", show_default=True,
                     help="load-generator workers (auto: half this host's cores, one to eight; "
                          "with --cluster, one per CPU of the cluster)"),
        click.option("--cluster", default=None, metavar="ray://ADDRESS|auto",
                     help="run the traffic workers as Ray actors on this cluster (needs speclab[ray])"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def cluster_settings(opts: dict[str, Any]) -> dict[str, Any]:
    """The RunOptions fields ``cluster_options`` fill, ``cluster`` checked here, inside the command,
    so a bad value is one line and exit 2; ``workers`` None (auto on a cluster) is one per CPU there."""
    from speclab.traffic.cluster import check_cluster

    cluster = check_cluster(opts.get("cluster"))
    workers = opts.get("workers")
    if workers is None or workers == AUTO_WORKERS:
        return {"workers": None if cluster else auto_workers(), "cluster": cluster}
    check_option("--workers", int(workers), 1, MAX_WORKERS)  # before the banner, not when the workers start
    return {"workers": int(workers), "cluster": cluster}


def metrics_options(fn: F) -> F:
    """``--metrics-port`` and its companions, for every command that runs traffic (run, lab, sweep, drill)."""
    options = [
        click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
                     help="serve speclab's own Prometheus metrics on PORT (0: any free port)"),
        click.option("--metrics-host", default="127.0.0.1", show_default=True, help="address for --metrics-port"),
        click.option("--metrics-hold", "metrics_hold_s", type=click.FloatRange(min=0), default=0.0, metavar="S",
                     help="after the run, keep serving the final metrics S seconds so a last scrape sees them"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def metrics_settings(opts: dict[str, Any]) -> dict[str, Any]:
    """The RunOptions fields ``metrics_options`` fill."""
    return {"metrics_port": opts.get("metrics_port"), "metrics_host": opts.get("metrics_host") or "127.0.0.1",
            "metrics_hold_s": float(opts.get("metrics_hold_s") or 0.0)}


def attach_options(fn: F) -> F:
    options = [
        click.option("--attach", "attach", multiple=True, help="[LABEL=]URL of a server speclab did not launch"),
        click.option("--header", "headers", multiple=True, help="K=V header for attached servers"),
        click.option("--api-key-env", default=None, help="environment variable holding the API key"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn
