"""Calibrate the load generator's health limits against a server that knows the truth.

speclab's workers judge each 1 s interval from what they can see of themselves (schedule lag, how
late a 2 ms ticker wakes, weighted by how long each stall lasted, CPU share) and flag it when the
client's own error may be above what a measurement can bear. Whether that flag is right can only be
told from outside: this bench fires speclab's real traffic worker (``TrafficRunner``, one worker
process, this process as its parent) at bench_loadgen's ground-truth server, which logs the kernel's
receive time of every request and when it wrote the first chunk, so each interval's true TTFT error
p99 is known. A background process that switches between burning a core and sleeping, for random
spans, makes some intervals bad and leaves others clean, as a shared host does. With ``--neighbour
LAB`` the neighbours are instead LAB's simulators, launched as speclab launches them and fired the
same plan from the same worker, as ``speclab run --lab LAB`` does; only the truth server's requests
are judged. ``--neighbour none`` runs the client alone with the truth server. With ``--real LAB``
it runs ``speclab run SCENARIO --lab LAB`` itself, the truth server attached beside LAB's servers,
so the parent, the scenario and the flag are the real ones.

Each interval's true error is also split into its way out (the server's kernel receive time − the
client's ``sent``) and the rest, beside the worker's own measure of its way out (send delay p99,
stamped as aiohttp writes each request) and of its way back (read lateness p99.5 over moments,
``health.read_lateness``; the ticks' p99, ``p99``, for comparison), and how late the load reached
the server against its plan (kernel receive − ``intended``). An interval is truly bad when its true
TTFT error p99 is above ``--bad-ms`` or that lateness p99 is above ``--schedule-bad-ms`` (see
``bench/fit_health.py``). It scores the limits speclab ships with (``speclab.traffic.health``)
against that truth, and the flag without its schedule part against the TTFT truth alone, and lists
the best limits on this run alone; ``--json`` keeps the rows for ``bench/fit_health.py``, which fits
the limits on some runs and scores them on others.

    .venv/bin/python bench/calibrate_health.py [--rates 50,100,200,300,400,500] [--duration 12] [--bad-ms 5]
    .venv/bin/python bench/calibrate_health.py --neighbour default --rates 7,15 --duration 25 --min-requests 5
    .venv/bin/python bench/calibrate_health.py --real default --duration 25 --min-requests 5 [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_health import SHIPPED, TARGET_FALSE, TARGET_HIT, Row, fit, pct, score, truths
from loadgen_plan import Workload, write_scenario
from loadgen_runs import MODEL, ServerConfig, TruthServer, read_recording, speclab_argv
from loadgen_truth import (
    ClientRecord,
    FlagScore,
    Pair,
    ServerRecord,
    interval_truth,
    match,
    percentile,
    score_flag,
)

from speclab.model.errors import InputError
from speclab.model.lab import Lab, load_lab
from speclab.model.records import RequestRecord
from speclab.model.scenario import load_scenario
from speclab.servers.manager import ServerManager
from speclab.session.relaunch import target_for
from speclab.traffic import health
from speclab.traffic.client import Target
from speclab.traffic.health import WorkerHealth
from speclab.traffic.runner import TrafficRunner
from speclab.traffic.schedule import build_plan

TRUTH = "bench"  # the truth server's variant name


def hog(seed: int, stop_at: float) -> None:
    """Burn a core for random spans of 0.2-2 s, sleep for others, until ``stop_at`` (monotonic)."""
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        span = rng.uniform(0.2, 2.0)
        end = time.monotonic() + span
        if rng.random() < 0.5:
            while time.monotonic() < end:
                pass
        else:
            time.sleep(span)


@dataclass(frozen=True)
class Interval:
    rate: float
    index: int
    requests: int
    true_p99_ms: float
    schedule_p99_ms: float
    loop_p99_ms: float
    loop_max_ms: float
    read_lateness_ms: float
    cpu_percent: float
    flagged: bool  # as speclab's shipped limits judged it
    send_p99_ms: float = 0.0  # the error's way out: server's kernel receive − client's sent, p99
    read_p99_ms: float = 0.0  # the rest (way back and late reads): error − way out, p99
    send_delay_p99_ms: float = 0.0  # the client's own measure of its way out (health.send_delay_p99_ms)
    true_schedule_p99_ms: float = 0.0  # the load's lateness seen from outside: server's kernel receive − intended, p99


async def fire(scenario: Path, url: str, lab: Lab | None, workdir: Path) -> tuple[list[RequestRecord], list[WorkerHealth], float]:
    """Fire the plan at the truth server, and, with ``lab``, at that lab's simulators from the same worker.

    Also returns the run clock's origin on the wall clock (the truth server stamps wall time)."""
    plan = build_plan(load_scenario(scenario))
    records: list[RequestRecord] = []
    reports: list[WorkerHealth] = []
    targets = {TRUTH: Target(TRUTH, url, MODEL)}
    async with contextlib.AsyncExitStack() as stack:
        if lab is not None:
            manager = await stack.enter_async_context(ServerManager(lab, "sim", log_dir=workdir / "servers"))
            targets.update({name: target_for(s, epoch=1) for name, s in (await manager.start()).items()})
        run_start = time.monotonic()
        origin = time.time() - (time.monotonic() - run_start)
        runner = TrafficRunner(plan, targets, workers=1, run_start=run_start,
                               on_records=records.extend, on_health=reports.append)
        await runner.start()
        await runner.finished
    return [r for r in records if r.variant == TRUTH], reports, origin


def run_rate(rate: float, duration: float, seed: int, config: ServerConfig, workdir: Path, lab: Lab | None,
             min_requests: int, hog_too: bool = True) -> list[Interval]:
    work = Workload(rate, duration, seed)
    scenario = write_scenario(workdir / f"cal-r{rate:g}.toml", f"cal-r{rate:g}", work)
    server = TruthServer(config, workdir / f"server-r{rate:g}.json", workdir / f"server-r{rate:g}.log")
    noise = None
    if lab is None and hog_too:
        noise = multiprocessing.get_context("spawn").Process(target=hog, args=(seed + int(rate), time.monotonic() + duration + 30))
        noise.start()
    try:
        records, reports, origin = asyncio.run(fire(scenario, server.url, lab, workdir))
    finally:
        if noise is not None:
            noise.terminate()
            noise.join()
        truth = server.stop()
    client = [ClientRecord(r.request_id, r.intended, r.sent, r.first_token, r.done, r.ok) for r in records]
    by_interval = {h.interval: h for h in reports}
    pairs = match(client, truth.records)
    ways = split_ways(pairs, {r.request_id: r for r in records}, truth.records, origin)
    out = []
    for row in interval_truth(pairs):
        h = by_interval.get(row.index)
        if h is None or row.requests < min_requests:
            continue
        send, read, late = ways.get(row.index, ([], [], []))
        out.append(Interval(rate, row.index, row.requests, row.error_p99_ms, h.schedule_lag_p99_ms, h.loop_lag_p99_ms,
                            h.loop_lag_max_ms, h.read_lateness_ms, h.cpu_percent, h.saturated,
                            percentile(send, 99) if send else 0.0, percentile(read, 99) if read else 0.0,
                            h.send_delay_p99_ms, percentile(late, 99) if late else 0.0))
    return out


def split_ways(pairs: list[Pair], records: dict[str, RequestRecord], server: dict[str, ServerRecord],
               origin: float) -> dict[int, tuple[list[float], list[float], list[float]]]:
    """Per interval (of the first token), each request's error split into its way out (the truth
    server's kernel receive time − the client's ``sent``, both on the wall clock) and the rest, and
    how late the request reached the server against the plan (kernel receive − ``intended``), in ms."""
    ways: dict[int, tuple[list[float], list[float], list[float]]] = {}
    for pair in pairs:
        record = records[pair.request_id]
        if record.sent is None:
            continue
        rx = server[pair.request_id].rx_kernel
        out_ms = (rx - (origin + record.sent)) * 1000.0
        send, read, late = ways.setdefault(int(pair.first_token // 1.0), ([], [], []))
        send.append(out_ms)
        read.append(pair.error * 1000.0 - out_ms)
        late.append((rx - (origin + record.intended)) * 1000.0)
    return ways


def run_real(lab: str, scenario: Path, duration: float, config: ServerConfig, workdir: Path, min_requests: int,
             bad_ms: float, repeat: int) -> FlagScore:
    """``speclab run SCENARIO --lab LAB --attach bench=URL`` itself: the real parent (recording, scrapes,
    progress lines) and the real scenario, fired at LAB's simulators and the truth server alike; the
    intervals its recording flagged are scored against the truth server's requests."""
    run_dir = workdir / f"real-{repeat}"
    run_dir.mkdir()
    server = TruthServer(config, run_dir / "server.json", run_dir / "server.log")
    try:
        argv = speclab_argv(scenario, server.url, 1, run_dir / "recording", run_dir / "report.md")
        argv[argv.index("--workers"):argv.index("--workers") + 2] = ["--lab", lab, "--duration", f"{duration:g}"]
        done = subprocess.run(argv, capture_output=True, text=True)
    finally:
        truth = server.stop()
    verdict = ([line for line in (done.stdout + done.stderr).splitlines() if line.startswith("exit ")] or ["no verdict line"])[-1]
    if not (run_dir / "recording" / "requests.jsonl").exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"run {repeat}: speclab run left no recording (exit {done.returncode}): {last}")
    records, flagged = read_recording(run_dir / "recording", TRUTH)
    rows = interval_truth(match(records, truth.records))
    result = score_flag(rows, flagged, bad_ms, min_requests=min_requests)
    print(f"\nrun {repeat}: `speclab run {scenario} --lab {lab} --attach {TRUTH}=URL --duration {duration:g}`: "
          f"{verdict}; {len(flagged)} intervals flagged")
    print(f"{'interval':>9}{'requests':>9}{'true p99 ms':>12}  flagged")
    for row in rows:
        judged = "" if row.requests >= min_requests else "  (too few requests to judge)"
        print(f"{row.index:>9}{row.requests:>9}{row.error_p99_ms:>12.1f}  {'yes' if row.index in flagged else '-'}{judged}")
    print(f"bad (true p99 > {bad_ms:g} ms) flagged {pct(result.caught, result.bad)}, "
          f"accurate flagged {pct(result.false_alarms, result.good)}")
    return result


def span(rows: list[Interval], get: Callable[[Interval], float]) -> str:
    values = [get(r) for r in rows]
    return f"{min(values):.1f}-{max(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default=None, help="req/s per target, comma-separated (default 50,100,200,300,400,500)")
    parser.add_argument("--duration", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bad-ms", type=float, default=5.0, help="an interval is bad above this true error p99")
    parser.add_argument("--schedule-bad-ms", type=float, default=health.SCHEDULE_LAG_LIMIT_MS,
                        help="or above this p99 of the load's lateness at the server (kernel receive − intended)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--neighbour", metavar="LAB", default=None,
                        help="instead of the core-burning process, launch LAB's simulators and fire the same plan at "
                             "them from the same worker, as `speclab run --lab LAB` does (e.g. default); `none`: "
                             "no neighbour, the client alone with the truth server")
    parser.add_argument("--min-requests", type=int, default=10, help="judge only intervals with this many requests")
    parser.add_argument("--real", metavar="LAB", default=None,
                        help="run `speclab run SCENARIO --lab LAB` itself with the truth server attached beside LAB's "
                             "servers, and score the intervals its recording flagged (not with --rates or --neighbour)")
    parser.add_argument("--scenario", type=Path, default=None, help="with --real (default scenarios/mixed.toml)")
    parser.add_argument("--repeat", type=int, default=None, help="with --real: how many runs (default 1)")
    args = parser.parse_args()
    if args.real is None and (args.scenario is not None or args.repeat is not None):
        parser.error("--scenario and --repeat belong to --real")
    if args.real is not None:
        if args.neighbour is not None or args.rates is not None:
            parser.error("--real takes its rates from SCENARIO and brings its lab's simulators: no --rates or --neighbour")
        try:
            load_lab(args.real)
        except InputError as error:
            parser.error(f"--real: {error}")
        with tempfile.TemporaryDirectory(prefix="calibrate-health-") as tmp:
            scenario = args.scenario or Path("scenarios/mixed.toml")
            scores = [run_real(args.real, scenario, args.duration, ServerConfig(50.0, 10.0, 64), Path(tmp),
                               args.min_requests, args.bad_ms, repeat) for repeat in range(args.repeat or 1)]
        print(f"\nall {len(scores)} runs: bad flagged {pct(sum(x.caught for x in scores), sum(x.bad for x in scores))}, "
              f"accurate flagged {pct(sum(x.false_alarms for x in scores), sum(x.good for x in scores))} "
              f"(targets: >= {TARGET_HIT:.0%} and <= {TARGET_FALSE:.0%})")
        return
    try:
        lab = load_lab(args.neighbour) if args.neighbour and args.neighbour != "none" else None
    except InputError as error:
        parser.error(f"--neighbour: {error}")
    rates = [float(r) for r in (args.rates or "50,100,200,300,400,500").split(",") if r.strip()]
    config = ServerConfig(50.0, 10.0, 64)
    rows: list[Interval] = []
    with tempfile.TemporaryDirectory(prefix="calibrate-health-") as tmp:
        for rate in rates:
            got = run_rate(rate, args.duration, args.seed, config, Path(tmp), lab, args.min_requests,
                           hog_too=args.neighbour != "none")
            rows.extend(got)
            bad = sum(r.true_p99_ms > args.bad_ms for r in got)
            print(f"  {rate:g}/s: {len(got)} intervals judged, {bad} truly bad", file=sys.stderr, flush=True)
    noise = (f"{lab.name} lab's {len(lab.variant_names)} simulators" if lab else
             "none (the host's own load only)" if args.neighbour == "none" else "a core-burning process")
    print(f"\nneighbour: {noise}; {len(rows)} intervals of >= {args.min_requests} requests; bad = true TTFT error p99 > {args.bad_ms:g} ms "
          f"(targets: >= {TARGET_HIT:.0%} of bad flagged, <= {TARGET_FALSE:.0%} of accurate flagged)")
    print(f"{'rate':>6}{'intervals':>10}{'bad':>6}{'true p99 ms (min-max)':>24}{'loop p99 ms (min-max)':>24}"
          f"{'sched p99 ms (min-max)':>24}{'read late p99.5 (min-max)':>27}{'way out p99 ms':>16}{'way back p99 ms':>17}")
    for rate in rates:
        mine = [r for r in rows if r.rate == rate]
        if not mine:
            continue
        print(f"{rate:>6g}{len(mine):>10}{sum(r.true_p99_ms > args.bad_ms for r in mine):>6}"
              f"{span(mine, lambda r: r.true_p99_ms):>24}{span(mine, lambda r: r.loop_p99_ms):>24}"
              f"{span(mine, lambda r: r.schedule_p99_ms):>24}{span(mine, lambda r: r.read_lateness_ms):>27}"
              f"{span(mine, lambda r: r.send_p99_ms):>16}{span(mine, lambda r: r.read_p99_ms):>17}")
    fit_rows = [Row(**{f.name: getattr(r, f.name) for f in fields(Row) if f.name != "source"}, source="this run")
                for r in rows]
    is_bad = truths(args.bad_ms, args.schedule_bad_ms)
    bad_of = {(r.rate, r.index): is_bad["either"](row) for r, row in zip(rows, fit_rows, strict=True)}
    wrong = [r for r in rows if r.flagged != bad_of[(r.rate, r.index)]]
    if wrong:
        print("\nintervals the shipped limits judged wrongly (true p99 = way out + way back, each a p99 of its own; "
              "late = the load's lateness at the server)")
        print(f"{'rate':>6}{'interval':>9}{'requests':>9}{'true p99':>9}{'way out':>8}{'way back':>9}{'late':>6}"
              f"{'own out':>8}{'read late':>10}{'loop p99':>9}{'sched p99':>10}{'cpu %':>6}  verdict")
        for r in wrong:
            print(f"{r.rate:>6g}{r.index:>9}{r.requests:>9}{r.true_p99_ms:>9.1f}{r.send_p99_ms:>8.1f}{r.read_p99_ms:>9.1f}"
                  f"{r.true_schedule_p99_ms:>6.1f}{r.send_delay_p99_ms:>8.1f}{r.read_lateness_ms:>10.2f}{r.loop_p99_ms:>9.1f}"
                  f"{r.schedule_p99_ms:>10.1f}{r.cpu_percent:>6.0f}  {'missed' if not r.flagged else 'false alarm'}")
    print(f"\nbad: true TTFT error p99 > {args.bad_ms:g} ms, or the load's lateness at the server p99 > "
          f"{args.schedule_bad_ms:g} ms ({sum(bad_of.values())} of {len(rows)} intervals); "
          f"on TTFT alone {sum(map(is_bad['ttft'], fit_rows))}")
    print(f"speclab's shipped limits ({SHIPPED.describe()}):")
    print(f"  the whole flag against either truth: {score(fit_rows, is_bad['either'], SHIPPED.flags)}")
    print(f"  the flag without its schedule part against the TTFT truth: "
          f"{score(fit_rows, is_bad['ttft'], lambda r: SHIPPED.flags(r, schedule=False))}")
    print("the best limits on this run alone (in-sample; fit on some runs and score on others with "
          "bench/fit_health.py and --json):")
    for result, fitted in fit(fit_rows, is_bad["either"])[:5]:
        print(f"  {'meets' if result.meets else 'short'}  {result}  <- {fitted.describe()}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
