"""What the worker's health ticker costs by itself: CPU per second of an otherwise idle uvloop loop.

The traffic worker samples its event loop's lag every ``TICK_S`` (2 ms; ``speclab/traffic/health.py``):
the read lateness the health flag judges is computed from those samples, and the worker flushes its
record batches on the same tick. Each tick wakes the loop. Where traffic already keeps the loop awake
the wake-ups partly coincide with socket events; on an idle or lightly loaded loop each is a wake-up
of its own. This bench runs, in one child process per run, the real ``HealthMonitor.run()`` on uvloop
for ``--seconds`` with nothing else to do, and beside it the same loop with no ticker, alternating
``--repeats`` times; it prints the process CPU per wall second and ticks per second of each run.

    .venv/bin/python bench/bench_health_ticker.py [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def _idle(seconds: float, ticker: bool) -> dict[str, float]:
    from speclab.traffic.health import HealthMonitor

    ticks = 0

    def on_tick(_now: float) -> None:
        nonlocal ticks
        ticks += 1

    monitor = HealthMonitor(0, time.monotonic(), lambda: (0, 0, 0), lambda _h: None, on_tick=on_tick)
    task = asyncio.ensure_future(monitor.run()) if ticker else None
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    if task is not None:
        task.cancel()
    return {"cpu_ms_per_s": 1000.0 * cpu / wall, "ticks_per_s": ticks / wall}


def _child(seconds: float, ticker: bool) -> None:
    import uvloop

    print(json.dumps(uvloop.run(_idle(seconds, ticker))))


def _run(seconds: float, ticker: bool) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "ticker" if ticker else "none", "--seconds", str(seconds)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 60)
    return dict(json.loads(out.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=("ticker", "none"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.seconds, args.child == "ticker")
        return 0
    from speclab.traffic.health import TICK_S

    runs: dict[str, list[dict[str, float]]] = {"none": [], "ticker": []}
    try:
        for i in range(args.repeats):
            for kind in (("none", "ticker") if i % 2 == 0 else ("ticker", "none")):
                row = _run(args.seconds, kind == "ticker")
                runs[kind].append(row)
                print(f"  {kind:6s} run {i + 1}: {row['cpu_ms_per_s']:6.1f} ms CPU/s, {row['ticks_per_s']:5.0f} ticks/s",
                      flush=True)
    except KeyboardInterrupt:
        print("bench_health_ticker: interrupted; the runs so far are below", file=sys.stderr)
    except subprocess.SubprocessError as exc:
        print(f"bench_health_ticker: a run failed ({exc}); the runs so far are below", file=sys.stderr)
    print(f"idle uvloop loop, {args.seconds:g} s per run, tick {TICK_S * 1000:g} ms (medians over the runs):")
    for kind, rows in runs.items():
        if rows:
            cpu = statistics.median(r["cpu_ms_per_s"] for r in rows)
            ticks = statistics.median(r["ticks_per_s"] for r in rows)
            print(f"{kind:6s} {cpu:6.1f} ms CPU/s  {ticks:5.0f} ticks/s  ({len(rows)} runs)")
    if runs["none"] and runs["ticker"]:
        extra = (statistics.median(r["cpu_ms_per_s"] for r in runs["ticker"])
                 - statistics.median(r["cpu_ms_per_s"] for r in runs["none"]))
        ticks = statistics.median(r["ticks_per_s"] for r in runs["ticker"])
        print(f"the ticker: {extra:.1f} ms of CPU a second, {1000.0 * extra / max(ticks, 1.0):.1f} µs a tick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
