"""Command bodies: turn parsed options into a session, a front end and an exit code."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

import click

from speclab.model.errors import InputError, SpeclabError
from speclab.model.exit_codes import ExitCode
from speclab.model.time_scale import parse_time_scale
from speclab.servers.backends.ids import AUTO
from speclab.session.options import RunOptions

from .base import require_terminal
from .options import cluster_settings, metrics_settings

LAB_DEFAULT_DURATION_S = 24 * 3600.0
DEFAULT_LAB = "default"
DEFAULT_SCENARIO = "mixed"


def _variants(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    repeated = sorted({n for n in names if names.count(n) > 1})
    if not names or repeated:
        raise InputError(f"--variants {value!r}: " + (f"{', '.join(repeated)} named twice" if repeated
                                                       else "expected comma-separated variant names"))
    return names


def run_options(scenario: str, opts: dict[str, Any], *, lab: str | None = None) -> RunOptions:
    return RunOptions(
        scenario=scenario,
        lab=lab or opts.get("lab_name_opt"),
        engine=opts.get("engine", "auto"),
        attach=tuple(opts.get("attach") or ()),
        headers=tuple(opts.get("headers") or ()),
        api_key_env=opts.get("api_key_env"),
        record_path=opts.get("record_path"),
        report_dir=opts.get("report_dir"),
        duration=opts.get("duration"),
        requests=opts.get("requests"),
        rate=opts.get("rate"),
        concurrency=opts.get("concurrency"),
        seed=opts.get("seed"),
        sequential=bool(opts.get("sequential")),
        variants=_variants(opts.get("variants")),
        force=bool(opts.get("force")),
        changes=tuple(opts.get("changes") or ()),
        time_scale=parse_time_scale(opts.get("time_scale")),
        **metrics_settings(opts),
        **cluster_settings(opts),
    )


def run_headless(scenario: str, opts: dict[str, Any]) -> int:
    from speclab.headless.run import run_session

    options = run_options(scenario, opts)
    return int(asyncio.run(run_session(options)))


def lab_positionals(lab_name: str | None, scenario: str | None, attach: bool) -> tuple[str | None, str]:
    """(lab, scenario) from `speclab lab [LAB] [SCENARIO]`; with --attach the one positional is the
    scenario (an empty LAB, as older command lines passed, is accepted and means none)."""
    if attach:
        if scenario is None:
            return None, lab_name or DEFAULT_SCENARIO
        if lab_name:
            raise InputError(f"speclab lab --attach: give only [SCENARIO] (got {lab_name!r} and {scenario!r}); "
                             "attached servers are measured instead of a lab's")
        return None, scenario
    return lab_name or DEFAULT_LAB, scenario or DEFAULT_SCENARIO


def default_recording(now: float | None = None) -> Path:
    """recordings/YYYYmmdd-HHMMSS in the current directory (a suffix if that exists)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = Path("recordings") / stamp
    n = 2
    while path.exists():
        path, n = Path("recordings") / f"{stamp}-{n}", n + 1
    return path


def open_lab(lab_name: str | None, scenario: str | None, opts: dict[str, Any]) -> int:
    from speclab.session.live import LiveSession
    from speclab.ui.app import create_app

    lab, scenario_name = lab_positionals(lab_name, scenario, bool(opts.get("attach")))
    if opts.get("report_dir") is not None and opts.get("no_record"):
        raise InputError("lab: --report is built from the lab's recording when it closes; drop --no-record")
    if opts.get("record_path") is None and not opts.get("no_record"):
        opts = {**opts, "record_path": default_recording()}
    options = run_options(scenario_name, opts, lab=opts.get("lab_name_opt") or lab)
    if options.duration is None and options.requests is None:
        # The lab stays open all day: the scenario's traffic runs until `q` unless bounded here.
        options = dataclasses.replace(options, duration=LAB_DEFAULT_DURATION_S)
    session = LiveSession(dataclasses.replace(options, keep_records=False, keep_intervals=False))
    app = create_app(session, session, yield_cpu=True, stop_on_sigint=True)
    try:
        require_terminal("lab", "for a run without the app use `speclab run`")
        app.run()
        if session.final is None and not session.stopped:
            # The app ended without `q` (a crash): stop what it started. Servers run under a reaper
            # and traffic workers are daemons, so nothing outlives this process even if this fails.
            with contextlib.suppress(Exception):
                asyncio.run(session.stop())
    finally:
        session.close_metrics()
    if app.source_error is not None and session.final is None:
        raise app.source_error  # e.g. a server never became ready: one line and its exit code
    for line in lab_summary(session):
        click.echo(line)
    if options.report_dir is not None and options.record_path is not None and session.recorder is None:
        click.echo("report: none; it is built from the recording, and nothing was recorded")
    elif options.report_dir is not None and options.record_path is not None:
        from speclab.headless.recording_report import write_recording_report
        from speclab.recording.reader import Recording

        for path in write_recording_report(Recording.open(options.record_path), Path(options.report_dir),
                                           command="lab"):
            click.echo(f"report: {path}")
    return int(app.return_code or 0)


def lab_summary(session: Any) -> list[str]:
    """What the lab measured and where it went, printed once the app has closed."""
    from speclab.headless.progress import progress_line

    lines = []
    if session.final is not None:
        lines.append(f"speclab lab: {session.info.scenario} on {session.info.lab}: {progress_line(session.final, whole_run=True)}")
    path = session.options.record_path
    if path is not None and session.recorder is None:  # it opens once the servers answer
        lines.append(f"recording: none; the lab closed before its traffic started (nothing written to {path})")
    elif path is not None:
        failure = getattr(session.recorder, "failure", None)
        lines.append(f"recording: {path}" + (f" ({failure})" if failure else f" (replay: speclab replay {path})"))
    return lines


def show_lab(lab_name: str, engine: str) -> int:
    from speclab.model.lab import load_lab
    from speclab.servers.argv import render_show_lines
    from speclab.servers.engine import select_engine

    lab = load_lab(lab_name)
    choice = select_engine(engine)  # `--engine vllm` where vLLM is absent is refused, as `run` refuses it
    for line in render_show_lines(lab, engine_available=choice.engine):
        click.echo(line)
    return int(ExitCode.OK)


def run_accept(lab_name: str, opts: dict[str, Any]) -> int:
    from speclab.session.accept import AcceptOptions, run_accept_stages

    stages = None if opts.get("stages") is None else tuple(s.strip() for s in opts["stages"].split(","))
    options = AcceptOptions(
        lab=lab_name, gates_file=opts.get("gates_file"), profile=opts.get("profile") or "quick", stages=stages,
        keep_going=bool(opts.get("keep_going")), report_dir=opts.get("report_dir"),
        record_path=opts.get("record_path"), engine=opts.get("engine") or "auto", force=bool(opts.get("force")),
        seed=opts.get("seed"), time_scale=parse_time_scale(opts.get("time_scale")), **cluster_settings(opts),
    )
    return int(asyncio.run(run_accept_stages(options)))


def replay_mode_problem(opts: dict[str, Any]) -> str | None:
    """Why options given to `replay` do not apply to its mode (the app, --report or --refire), or None.
    An option at its default counts as not given: `--speed 1` or `--engine auto` is never refused."""
    problems = []
    if not opts.get("refire"):
        given = [flag for key, flag in (("lab_name", "--lab"), ("engine", "--engine"), ("force", "--force"))
                 if opts.get(key) not in (None, False, AUTO)]
        if given:
            problems.append(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only with --refire")
    if (opts.get("refire") or opts.get("report_dir")) and float(opts.get("speed") or 1.0) != 1.0:
        problems.append("--speed applies only when replaying in the app, not with --report or --refire")
    return f"replay: {'; '.join(problems)}" if problems else None


def run_replay(recording: str, opts: dict[str, Any]) -> int:
    from speclab.model import limits
    from speclab.model.paths import resolve
    from speclab.recording.reader import Recording

    limits.check_option("--speed", opts.get("speed"), limits.MIN_REPLAY_SPEED, limits.MAX_REPLAY_SPEED)
    problem = replay_mode_problem(opts)
    if problem is not None:
        raise InputError(problem)
    rec = Recording.open(resolve(recording, "recordings"))
    for warning in rec.warnings:
        click.echo(f"warning: {warning}", err=True)
    if opts.get("refire"):
        from speclab.headless.refire import RefireOptions, refire

        refire_options = RefireOptions(lab_name=opts.get("lab_name"), engine=opts.get("engine") or AUTO,
                                       report_dir=opts.get("report_dir"), force=bool(opts.get("force")))
        return int(asyncio.run(refire(rec, refire_options)))
    if opts.get("report_dir"):
        from speclab.headless.recording_report import write_recording_report

        for path in write_recording_report(rec, Path(opts["report_dir"])):
            click.echo(f"report: {path}")
        return int(ExitCode.OK)
    from speclab.recording.replay import ReplaySource
    from speclab.ui.app import create_app

    require_terminal("replay", "for the report alone use --report DIR")
    source = ReplaySource(rec, speed=float(opts.get("speed") or 1.0))
    app = create_app(source, None, replay=source, stop_on_sigint=True)
    app.run()
    return int(app.return_code or 0)


def run_compare(a: str, b: str, report_dir: Path | None) -> int:
    from speclab.model.paths import resolve
    from speclab.recording.compare import compare_recordings, render_markdown, write_comparison
    from speclab.recording.reader import Recording

    pa, pb = resolve(a, "recordings"), resolve(b, "recordings")
    ra, rb = Recording.open(pa), Recording.open(pb)
    for name, rec in ((a, ra), (b, rb)):  # as replay says them: a cut recording is no silent zero
        for warning in rec.warnings:
            click.echo(f"warning: {name}: {warning}", err=True)
    if Path(pa).resolve() == Path(pb).resolve():
        click.echo(f"warning: {a} and {b} are the same recording; every difference below is zero", err=True)
    result = compare_recordings(ra, rb)
    if result["scenarios"]["note"]:
        click.echo(f"warning: {result['scenarios']['note']}", err=True)
    if report_dir is not None:
        write_comparison(result, Path(report_dir))
        click.echo(f"comparison: {report_dir}/compare.json, {report_dir}/compare.md")
    else:
        click.echo(render_markdown(result))
    return int(ExitCode.OK)


def validate_files(files: tuple[str, ...]) -> int:
    """Validate each file by its kind (scenario, lab, gates — from its folder or its keys)."""
    from speclab.gates.golden import check_gate_classes, load_golden
    from speclab.model.gates import load_gates
    from speclab.model.lab import Lab
    from speclab.model.loading import load_model, load_toml
    from speclab.model.scenario import load_scenario
    from speclab.servers.pairing import vocab_problem
    from speclab.session.accept import GOLDEN_DIR

    problems = 0
    for name in files:
        path = Path(name)
        try:
            if not path.exists():
                raise InputError(f"{name}: no such file")
            data = load_toml(path)
            if "profiles" in data or path.name.startswith("gates"):
                gates = load_gates(path)
                golden = load_golden(GOLDEN_DIR)  # the set `accept` runs: a class it lacks is a misspelling
                for profile in (None, *gates.profiles):
                    check_gate_classes(gates.profile(profile).golden, golden, name)
                kind = "gates"
            elif "arrival" in data or "classes" in data:
                load_scenario(path)
                kind = "scenario"
            else:
                vocab = vocab_problem(load_model(path, Lab))
                if vocab is not None:
                    raise InputError(f"{name}: {vocab}")
                kind = "lab"
            click.echo(f"{name}: ok ({kind})")
        except SpeclabError as error:
            problems += 1
            for line in str(error).splitlines():
                click.echo(line, err=True)
    return int(ExitCode.BAD_INPUT if problems else ExitCode.OK)
