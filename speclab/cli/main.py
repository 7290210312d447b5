"""`speclab` commands (README.md). Thin: parse, build options, call a front end.

Every user-visible failure is one line on stderr and an exit code from ``ExitCode``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .base import DefaultGroup, _guard
from .drill import drill
from .gateway import gateway
from .options import attach_options, cluster_options, engine_option, run_options, time_scale_option
from .stdout_pipe import protect_stdout
from .sweep import sweep


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="speclab")
def cli() -> None:
    """speclab: a load-and-latency lab for speculative decoding on vLLM."""


@cli.group(cls=DefaultGroup, invoke_without_command=False)
def lab() -> None:
    """Open the lab app (default), or `lab show LAB`."""


@lab.command("open")
@click.argument("lab_name", required=False, default=None, metavar="[LAB]")
@click.argument("scenario", required=False, default=None, metavar="[SCENARIO]")
@run_options
@attach_options
@click.option("--no-record", is_flag=True, help="do not record (by default the lab records into recordings/)")
def lab_open(lab_name: str | None, scenario: str | None, **opts: Any) -> None:
    """Open the Textual app on LAB (default: the bundled lab on the simulator) and SCENARIO
    (default: mixed). With --attach the one positional is the SCENARIO. Records into
    recordings/TIME unless --record PATH or --no-record; prints a summary and the paths on exit."""
    from speclab.cli.commands import open_lab

    _guard(lambda: open_lab(lab_name, scenario, opts))


@lab.command("show")
@click.argument("lab_name", metavar="LAB")
@engine_option()
def lab_show(lab_name: str, engine: str) -> None:
    """Print the `vllm serve` line of each variant, then the simulator line for this machine."""
    from speclab.cli.commands import show_lab

    _guard(lambda: show_lab(lab_name, engine))


@cli.command()
@click.argument("scenario")
@run_options
@attach_options
def run(scenario: str, **opts: Any) -> None:
    """Run SCENARIO headless against a lab's servers (or --attach URLs)."""
    from speclab.cli.commands import run_headless

    _guard(lambda: run_headless(scenario, opts))


@cli.command()
@click.argument("lab_name", metavar="LAB")
@click.option("--gates", "gates_file", type=click.Path(path_type=Path), default=None, help="gates.toml")
@click.option("--profile", type=click.Choice(["quick", "release"]), default="quick", show_default=True)
@click.option("--stages", default=None, help="comma-separated subset of stages")
@click.option("--keep-going", is_flag=True, help="run every stage even after a failure")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
              help="directory for report.json, report.md and junit.xml")
@click.option("--record", "record_path", type=click.Path(path_type=Path), default=None,
              help="record the canary stage's run here (a directory; the other stages are not recorded)")
@engine_option()
@click.option("--force", is_flag=True, help="run an unpaired or misaligned pair anyway (said in the report)")
@click.option("--seed", type=int, default=None)
@time_scale_option
@cluster_options
def accept(lab_name: str, **opts: Any) -> None:
    """Run the release gates for LAB in the checklist's order."""
    from speclab.cli.commands import run_accept

    _guard(lambda: run_accept(lab_name, opts))


@cli.command()
@click.argument("recording")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None, help="headless: write a report")
@click.option("--refire", is_flag=True, help="send the recorded schedule at a lab and compare")
@click.option("--lab", "lab_name", default=None, help="lab for --refire (default: the recorded one)")
@engine_option()
@click.option("--speed", type=float, default=1.0, show_default=True)
@click.option("--force", is_flag=True)
def replay(recording: str, **opts: Any) -> None:
    """Replay RECORDING in the app, or recompute its report (--report), or --refire it."""
    from speclab.cli.commands import run_replay

    _guard(lambda: run_replay(recording, opts))


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None)
def compare(a: str, b: str, report_dir: Path | None) -> None:
    """Compare two recordings per class and variant."""
    from speclab.cli.commands import run_compare

    _guard(lambda: run_compare(a, b, report_dir))


@cli.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> None:
    """Validate scenario, lab and gates files; print every problem."""
    from speclab.cli.commands import validate_files

    _guard(lambda: validate_files(files))


@cli.command("monitoring-kit")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="write into a non-empty DIR, overwriting the kit's own files")
@click.option("--scrape-interval", default="15s", show_default=True, help="your Prometheus scrape interval")
@click.option("--check", is_flag=True, help="then run promtool check rules and test rules on the kit")
def monitoring_kit(directory: Path, force: bool, scrape_interval: str, check: bool) -> None:
    """Write Prometheus rules, their promtool tests and a Grafana dashboard for vLLM servers into DIR."""
    from speclab.cli.monitoring import write_monitoring_kit

    _guard(lambda: write_monitoring_kit(directory, force=force, scrape_interval=scrape_interval, check=check))


@cli.command("release-notes")
@click.argument("directories", nargs=-1, required=True, metavar="DIR...", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=Path("release"), show_default=True,
              help="directory for release.md and release.json")
def release_notes(directories: tuple[Path, ...], out: Path) -> None:
    """One release note from an accept report, a sweep directory and a drill report (their --report DIRs)."""
    from speclab.cli.release import release_notes as write

    _guard(lambda: write(directories, out))


cli.add_command(gateway)
cli.add_command(drill)
cli.add_command(sweep)


def main() -> None:
    protect_stdout()  # before any command binds sys.stdout: a reader that goes away stops no run
    cli(prog_name="speclab")


if __name__ == "__main__":
    main()
