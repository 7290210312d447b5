"""Does the simulator keep its modelled clock at a load, and at which time scale? Side by side.

Runs ``speclab run`` as a user would (a separate process, the bundled default lab on the
simulator, closed loop at each ``--concurrency`` level and each ``--time-scale``), then reads each
run's report.json: the time scale it ran at, the exit code, per simulator the drift p99 against
its mean modelled step (from the simulator's own /metrics) and the intervals it trailed in, and
the k4 TPOT speed-up over the baseline (p50, modelled time). Prints one row per run and ratios.

    .venv/bin/python bench/bench_time_scale.py --runs 1:auto,96:1,96:auto --duration 20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_one(concurrency: int, scale: str, duration: float, scenario: str, lab: str, out: Path,
            workers: int) -> dict[str, Any]:
    report = out / f"c{concurrency}-s{scale}"
    argv = [str(Path(sys.executable).parent / "speclab"), "run", scenario, "--lab", lab, "--engine", "sim",
            "--concurrency", str(concurrency), "--duration", f"{duration:g}", "--time-scale", scale,
            "--workers", str(workers), "--report", str(report)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    path = report / "report.json"
    if not path.exists():
        return {"concurrency": concurrency, "asked": scale, "exit": proc.returncode, "wall_s": wall,
                "line": last or proc.stderr.strip()[-300:]}
    rep = json.loads(path.read_text())
    tpot = {}
    for name, v in rep["variants"].items():
        lat = v["epochs"][-1]["classes"]["all"]["latency"].get("tpot") or {}
        tpot[name] = lat.get("p50_ms")
    clock = rep.get("simulator_clock", {}).get("variants", {})
    return {"concurrency": concurrency, "asked": scale, "time_scale": rep.get("time_scale"), "exit": proc.returncode,
            "wall_s": wall, "tpot_p50_ms": tpot, "clock": clock, "line": last,
            "client_saturated": len(rep["measurement"].get("client_saturated_intervals", ())),
            "touched": len(rep["measurement"]["saturated_intervals"]), "intervals": len(rep.get("timeline", ()))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="1:auto,96:1,96:auto", help="CONCURRENCY:SCALE,... (SCALE a number or auto)")
    p.add_argument("--duration", type=float, default=20.0, help="modelled seconds of traffic per run")
    p.add_argument("--scenario", default="mixed")
    p.add_argument("--lab", default="default")
    p.add_argument("--workers", type=int, default=1, help="load-generator processes of each run")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-time-scale-") as tmp:
        for spec in args.runs.split(","):
            conc, _, scale = spec.partition(":")
            row = run_one(int(conc), scale or "auto", args.duration, args.scenario, args.lab, Path(tmp), args.workers)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("concurrency | asked | S | exit | wall s | worst drift p99 / step | trailing intervals | client saturated | k4 TPOT speed-up")
    for r in rows:
        clock = r.get("clock") or {}
        ratios = [d["drift_p99_ms"] / d["step_mean_ms"] for d in clock.values() if d.get("step_mean_ms")]
        trailing = sum(len(d["trailing_intervals"]) for d in clock.values())
        t = r.get("tpot_p50_ms") or {}
        speedup = t["baseline"] / t["k4"] if t.get("baseline") and t.get("k4") else None
        print(f"{r['concurrency']} | {r['asked']} | {r.get('time_scale')} | {r['exit']} | {r['wall_s']:.0f} | "
              f"{max(ratios, default=0):.3f} | {trailing} | {r.get('client_saturated', '')} of {r.get('intervals', '')} | {'' if speedup is None else f'{speedup:.2f}x'}")
        if r["exit"] != 0:
            print(f"    {r['line']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
