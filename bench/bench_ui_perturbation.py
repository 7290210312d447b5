"""Does the lab app, rendering every snapshot, perturb load generation?

Runs the same scenario against the same simulated lab twice per rate: headless (`speclab run`'s
path: no screen) and with the Textual app open (headless Textual driver, polled at 4 Hz, the
latency view live, its event loop lowered and repaints capped as ``speclab lab`` runs it:
``speclab.ui.priority``). Traffic runs in worker processes either way; if the app stole the load
generator's time, schedule lag (sent − intended) would grow. Each run records, and the lags are
read back from its ``requests.jsonl``, so the bench sees what a reader of the recording sees.
Prints schedule-lag percentiles and the client's saturated intervals side by side, and the
ratio app / headless, per rate.

A rate at which the headless run itself is saturated (its schedule lag p99 above the health
flag's schedule-lag limit) overloads the host whatever the app does: its ratio compares two
collapsed runs and is no measure of the app's cost (the intervals the client flagged, which also
trip on event-loop lag alone, are printed beside). The bench says so and
names the largest rate tried where headless kept up. With ``--busy N``, N processes burn a core
each through all runs (a shared host).

    .venv/bin/python bench/bench_ui_perturbation.py [--scenario mixed] [--duration 20] [--rate 200,50,25]
        [--busy 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speclab.cli.commands import run_options
from speclab.session.live import LiveSession
from speclab.traffic.health import SCHEDULE_LAG_LIMIT_MS, percentile

TARGET = 0.10  # the app may add at most this much to the schedule lag's p99


@dataclass(frozen=True)
class Arm:
    requests: int
    p50: float
    p99: float
    max: float
    mean: float
    saturated: int  # intervals the client flagged
    intervals: int
    frames: int = 0

    @property
    def kept_up(self) -> bool:
        return self.p99 <= SCHEDULE_LAG_LIMIT_MS


def burn() -> None:
    while True:
        pass


def read_lags(record: Path) -> list[float]:
    lags = []
    with open(record / "requests.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("sent") is not None:
                lags.append(1000.0 * (r["sent"] - r["intended"]))
    return sorted(lags)


def measure(session: LiveSession, record: Path, frames: int = 0) -> Arm:
    lags = read_lags(record)
    final = session.final
    saturated = len(final.saturated_intervals) if final else -1
    intervals = final.interval + 1 if final is not None else 0
    nan = math.nan
    return Arm(len(lags), percentile(lags, 50) if lags else nan, percentile(lags, 99) if lags else nan,
               max(lags, default=nan), sum(lags) / len(lags) if lags else nan, saturated, intervals, frames)


async def headless(opts: dict[str, object], scenario: str) -> LiveSession:
    session = LiveSession(run_options(scenario, opts))
    await session.ensure_started()
    await session.wait()
    await session.stop()
    return session


async def with_app(opts: dict[str, object], scenario: str) -> tuple[LiveSession, int]:
    from speclab.ui.app import create_app

    session = LiveSession(run_options(scenario, opts))
    app = create_app(session, session, yield_cpu=True)
    frames = 0
    async with app.run_test(size=(120, 40)) as pilot:
        while session.final is None:
            await pilot.pause(0.25)
            frames += 1
        await pilot.pause(0.5)
        await session.stop()
        app.priority.restore()  # the next rate's headless arm runs at the priority it began with
    return session, frames


def run_rate(rate: float, args: argparse.Namespace, workdir: Path) -> dict[str, Arm]:
    base: dict[str, object] = {"lab_name_opt": "default", "duration": args.duration, "rate": rate,
                               "variants": "baseline,k4", "force": True}
    out = {}
    record = workdir / f"headless-{rate:g}"
    out["headless"] = measure(asyncio.run(headless({**base, "record_path": record}, args.scenario)), record)
    record = workdir / f"app-{rate:g}"
    session, frames = asyncio.run(with_app({**base, "record_path": record}, args.scenario))
    out["app open"] = measure(session, record, frames)
    return out


def _ratio(a: float, b: float) -> str:
    return "–" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}x"


def report(rate: float, arms: dict[str, Arm]) -> None:
    print(f"\n{rate:g} req/s per variant")
    print(f"{'run':<10} {'requests':>8} {'lag p50 ms':>11} {'lag p99 ms':>11} {'lag max ms':>11} "
          f"{'mean ms':>8} {'saturated':>10}")
    for name, arm in arms.items():
        print(f"{name:<10} {arm.requests:>8} {arm.p50:>11.2f} {arm.p99:>11.2f} {arm.max:>11.2f} {arm.mean:>8.2f} "
              f"{f'{arm.saturated}/{arm.intervals}':>10}")
    h, a = arms["headless"], arms["app open"]
    print(f"app rendered while polled {a.frames} times; ratio app/headless: p50 {_ratio(a.p50, h.p50)}  "
          f"p99 {_ratio(a.p99, h.p99)}  max {_ratio(a.max, h.max)}  mean {_ratio(a.mean, h.mean)}", flush=True)
    if not h.kept_up:
        print(f"headless is saturated at this rate (lag p99 {h.p99:.1f} ms against the {SCHEDULE_LAG_LIMIT_MS:g} ms "
              "limit): the ratio compares two collapsed runs, not the app's cost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="mixed")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rate", default="8", help="requests per second per variant; comma-separated for several")
    parser.add_argument("--busy", type=int, default=0, help="processes burning a core each through all runs")
    args = parser.parse_args()
    try:
        rates = [float(r) for r in args.rate.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rate: expected comma-separated numbers, got {args.rate!r}")
    if not rates or any(r <= 0 for r in rates) or args.duration <= 0 or args.busy < 0:
        parser.error("--rate and --duration must be positive, --busy at least 0")
    burners = [multiprocessing.get_context("spawn").Process(target=burn, daemon=True) for _ in range(args.busy)]
    results: dict[float, dict[str, Arm]] = {}
    try:
        for proc in burners:
            proc.start()
        print(f"scenario {args.scenario}, {args.duration:g} s per run, variants baseline,k4 (simulated), "
              f"{args.busy} other processes burning a core each through all runs", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
            for rate in rates:  # each rate's figures printed as soon as it is measured
                results[rate] = run_rate(rate, args, Path(tmp))
                report(rate, results[rate])
    finally:
        for proc in burners:
            proc.terminate()
            proc.join()
    kept = [rate for rate, arms in results.items() if arms["headless"].kept_up]
    if kept:
        best = max(kept)
        h, a = results[best]["headless"], results[best]["app open"]
        added = a.p99 / h.p99 - 1.0 if h.p99 > 0 else math.nan
        print(f"\nlargest rate tried where headless kept up: {best:g} req/s per variant; the app adds "
              f"{100 * added:+.0f}% to the lag p99 there (target < {100 * TARGET:.0f}%: "
              f"{'met' if added < TARGET else 'missed'})")
    else:
        print("\nheadless was saturated at every rate tried: no rate shows the app's own cost")


if __name__ == "__main__":
    main()
