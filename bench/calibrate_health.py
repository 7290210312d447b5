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
are judged.

The loop's lateness is tried three ways: the p99 over ticks (``p99``), the worst tick (``max``) and
the read lateness p99.5 over moments speclab judges (``late``, ``health.read_lateness``). It prints,
for each limit tried, the share of truly bad intervals (true error p99 above ``--bad-ms``) that
would be flagged and the share of accurate ones that would be, and the limits that meet the
targets (≥ 95% of bad ones flagged, ≤ 5% of accurate ones), then scores the limits speclab ships
with (``speclab.traffic.health``).

    .venv/bin/python bench/calibrate_health.py [--rates 50,100,200,300,400,500] [--duration 12] [--bad-ms 5]
    .venv/bin/python bench/calibrate_health.py --neighbour default --rates 7,15 --duration 25 --min-requests 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload, write_scenario
from loadgen_runs import MODEL, ServerConfig, TruthServer
from loadgen_truth import ClientRecord, interval_truth, match

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
TARGET_HIT = 0.95
TARGET_FALSE = 0.05


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


async def fire(scenario: Path, url: str, lab: Lab | None, workdir: Path) -> tuple[list[RequestRecord], list[WorkerHealth]]:
    """Fire the plan at the truth server, and, with ``lab``, at that lab's simulators from the same worker."""
    plan = build_plan(load_scenario(scenario))
    records: list[RequestRecord] = []
    reports: list[WorkerHealth] = []
    targets = {TRUTH: Target(TRUTH, url, MODEL)}
    async with contextlib.AsyncExitStack() as stack:
        if lab is not None:
            manager = await stack.enter_async_context(ServerManager(lab, "sim", log_dir=workdir / "servers"))
            targets.update({name: target_for(s, epoch=1) for name, s in (await manager.start()).items()})
        runner = TrafficRunner(plan, targets, workers=1, run_start=time.monotonic(),
                               on_records=records.extend, on_health=reports.append)
        await runner.start()
        await runner.finished
    return [r for r in records if r.variant == TRUTH], reports


def run_rate(rate: float, duration: float, seed: int, config: ServerConfig, workdir: Path, lab: Lab | None,
             min_requests: int) -> list[Interval]:
    work = Workload(rate, duration, seed)
    scenario = write_scenario(workdir / f"cal-r{rate:g}.toml", f"cal-r{rate:g}", work)
    server = TruthServer(config, workdir / f"server-r{rate:g}.json", workdir / f"server-r{rate:g}.log")
    noise = None
    if lab is None:
        noise = multiprocessing.get_context("spawn").Process(target=hog, args=(seed + int(rate), time.monotonic() + duration + 30))
        noise.start()
    try:
        records, reports = asyncio.run(fire(scenario, server.url, lab, workdir))
    finally:
        if noise is not None:
            noise.terminate()
            noise.join()
        truth = server.stop()
    client = [ClientRecord(r.request_id, r.intended, r.sent, r.first_token, r.done, r.ok) for r in records]
    by_interval = {h.interval: h for h in reports}
    out = []
    for row in interval_truth(match(client, truth.records)):
        h = by_interval.get(row.index)
        if h is None or row.requests < min_requests:
            continue
        out.append(Interval(rate, row.index, row.requests, row.error_p99_ms, h.schedule_lag_p99_ms, h.loop_lag_p99_ms,
                            h.loop_lag_max_ms, h.read_lateness_ms, h.cpu_percent, h.saturated))
    return out


def score(rows: list[Interval], bad_ms: float, flag: Callable[[Interval], bool]) -> tuple[int, int, int, int]:
    bad = [r for r in rows if r.true_p99_ms > bad_ms]
    good = [r for r in rows if r.true_p99_ms <= bad_ms]
    return len(bad), sum(flag(r) for r in bad), len(good), sum(flag(r) for r in good)


def limits(schedule_ms: float, loop_ms: float, stat: str = "p99") -> Callable[[Interval], bool]:
    def loop(r: Interval) -> float:
        return {"p99": r.loop_p99_ms, "max": r.loop_max_ms, "late": r.read_lateness_ms}[stat]
    return lambda r: (r.schedule_p99_ms > schedule_ms or loop(r) > loop_ms
                      or r.cpu_percent >= health.CPU_LIMIT_PERCENT)


def span(rows: list[Interval], get: Callable[[Interval], float]) -> str:
    values = [get(r) for r in rows]
    return f"{min(values):.1f}-{max(values):.1f}"


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100.0 * n / d:.0f}%)" if d else f"{n}/0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="50,100,200,300,400,500")
    parser.add_argument("--duration", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bad-ms", type=float, default=5.0, help="an interval is bad above this true error p99")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--neighbour", metavar="LAB", default=None,
                        help="instead of the core-burning process, launch LAB's simulators and fire the same plan at "
                             "them from the same worker, as `speclab run --lab LAB` does (e.g. default)")
    parser.add_argument("--min-requests", type=int, default=10, help="judge only intervals with this many requests")
    args = parser.parse_args()
    try:
        lab = load_lab(args.neighbour) if args.neighbour else None
    except InputError as error:
        parser.error(f"--neighbour: {error}")
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    config = ServerConfig(50.0, 10.0, 64)
    rows: list[Interval] = []
    with tempfile.TemporaryDirectory(prefix="calibrate-health-") as tmp:
        for rate in rates:
            got = run_rate(rate, args.duration, args.seed, config, Path(tmp), lab, args.min_requests)
            rows.extend(got)
            bad = sum(r.true_p99_ms > args.bad_ms for r in got)
            print(f"  {rate:g}/s: {len(got)} intervals judged, {bad} truly bad", file=sys.stderr, flush=True)
    noise = f"{lab.name} lab's {len(lab.variant_names)} simulators" if lab else "a core-burning process"
    print(f"\nneighbour: {noise}; {len(rows)} intervals of >= {args.min_requests} requests; bad = true TTFT error p99 > {args.bad_ms:g} ms "
          f"(targets: >= {TARGET_HIT:.0%} of bad flagged, <= {TARGET_FALSE:.0%} of accurate flagged)")
    print(f"{'rate':>6}{'intervals':>10}{'bad':>6}{'true p99 ms (min-max)':>24}{'loop p99 ms (min-max)':>24}"
          f"{'sched p99 ms (min-max)':>24}{'read late p99.5 (min-max)':>27}")
    for rate in rates:
        mine = [r for r in rows if r.rate == rate]
        if not mine:
            continue
        print(f"{rate:>6g}{len(mine):>10}{sum(r.true_p99_ms > args.bad_ms for r in mine):>6}"
              f"{span(mine, lambda r: r.true_p99_ms):>24}{span(mine, lambda r: r.loop_p99_ms):>24}"
              f"{span(mine, lambda r: r.schedule_p99_ms):>24}{span(mine, lambda r: r.read_lateness_ms):>27}")
    print(f"\n{'loop lag limit':>20}{'schedule lag p99 limit':>24}{'bad flagged':>18}{'accurate flagged':>20}  meets")
    best = None
    for stat, grid in (("p99", (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0)), ("max", (5.0, 10.0, 15.0, 20.0, 30.0)),
                       ("late", (1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 4.0))):
        for sched_limit in (2.0, 3.0, 5.0, 8.0):
            for loop_limit in grid:
                bad, caught, good, false = score(rows, args.bad_ms, limits(sched_limit, loop_limit, stat))
                meets = bad > 0 and good > 0 and caught >= TARGET_HIT * bad and false <= TARGET_FALSE * good
                print(f"{f'{stat} > {loop_limit:g} ms':>20}{sched_limit:>24g}{_pct(caught, bad):>18}"
                      f"{_pct(false, good):>20}  {'yes' if meets else 'no'}")
                margin = (caught / bad if bad else 0.0) - (false / good if good else 0.0)
                if best is None or margin > best[0]:
                    best = (margin, f"loop lag {stat} > {loop_limit:g} ms", sched_limit)
    bad, caught, good, false = score(rows, args.bad_ms, lambda r: r.flagged)
    print(f"\nspeclab's shipped limits (schedule lag p99 > {health.SCHEDULE_LAG_LIMIT_MS:g} ms, read lateness p99.5 > "
          f"{health.READ_LATENESS_LIMIT_MS:g} ms, CPU >= {health.CPU_LIMIT_PERCENT:g}%): bad flagged {_pct(caught, bad)}, "
          f"accurate flagged {_pct(false, good)}")
    if best is not None:
        print(f"best separation tried: {best[1]}, schedule lag p99 > {best[2]:g} ms "
              f"(hit rate minus false-alarm rate {best[0]:.2f})")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
