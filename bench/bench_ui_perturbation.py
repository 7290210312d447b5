"""Does the lab app, rendering every snapshot, perturb load generation?

Runs the same scenario against the same simulated lab twice: headless (`speclab run`'s path: no
screen) and with the Textual app open (headless Textual driver, rendering at the full 4 Hz
snapshot rate, the latency view live). Traffic runs in worker processes either way; if the app
stole the load generator's time, schedule lag (sent − intended) would grow. Prints schedule lag
percentiles and the client's saturated intervals side by side, and the ratio app / headless.

With ``--busy N``, N processes burn a core each during both runs (a shared host). The app lowers
its event loop's priority once traffic runs and repaints at most once a second while the client
is saturated (``speclab.ui.priority``), as ``speclab lab`` runs it.

    .venv/bin/python bench/bench_ui_perturbation.py [--scenario mixed] [--duration 20] [--rate 8] [--busy 1]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speclab.cli.commands import run_options
from speclab.session.live import LiveSession
from speclab.traffic.health import percentile


def _lags_ms(session: LiveSession) -> list[float]:
    return sorted(1000.0 * r.schedule_lag for r in session.records if r.schedule_lag is not None)


def burn() -> None:
    while True:
        pass


def _pct(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


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
    return session, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="mixed")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=8.0)
    parser.add_argument("--busy", type=int, default=0, help="processes burning a core each during both runs")
    args = parser.parse_args()
    burners = [multiprocessing.get_context("spawn").Process(target=burn, daemon=True) for _ in range(args.busy)]
    for proc in burners:
        proc.start()
    opts: dict[str, object] = {"lab_name_opt": "default", "duration": args.duration, "rate": args.rate,
                               "variants": "baseline,k4"}
    runs = {"headless": asyncio.run(headless(opts, args.scenario))}
    app_session, frames = asyncio.run(with_app(opts, args.scenario))
    runs["app open"] = app_session
    print(f"scenario {args.scenario}, {args.duration:g} s at {args.rate:g} req/s, variants baseline,k4 (simulated)")
    print(f"app rendered while polled {frames} times (snapshots at 4 Hz)")
    print(f"{'run':<10} {'requests':>8} {'lag p50 ms':>11} {'lag p99 ms':>11} {'lag max ms':>11} "
          f"{'mean ms':>8} {'saturated s':>12}")
    summary = {}
    for name, session in runs.items():
        lags = _lags_ms(session)
        final = session.final
        saturated = len(final.saturated_intervals) if final else -1
        summary[name] = (_pct(lags, 50), _pct(lags, 99), max(lags or [float("nan")]))
        print(f"{name:<10} {len(lags):>8} {_pct(lags, 50):>11.2f} {_pct(lags, 99):>11.2f} "
              f"{max(lags or [float('nan')]):>11.2f} {statistics.fmean(lags or [0]):>8.2f} {saturated:>12}")
    for proc in burners:
        proc.terminate()
        proc.join()
    print(f"{args.busy} other processes burning a core each during both runs")
    h, a = summary["headless"], summary["app open"]
    print(f"ratio app/headless: p50 {a[0] / h[0]:.2f}x  p99 {a[1] / h[1]:.2f}x  max {a[2] / h[2]:.2f}x")


if __name__ == "__main__":
    main()
