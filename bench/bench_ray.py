"""The accurate rate of speclab's traffic workers, local processes beside Ray actors on 1 and 2 nodes.

The same Poisson plans as ``bench_loadgen.py`` (its ground-truth server in its own process:
vLLM-shaped SSE, 64 tokens, 50 ms to the first, 10 ms each), fired by ``speclab run --attach URL``
with local workers and with ``--cluster`` on a real Ray cluster started here on 127.0.0.1: one
node with one CPU (``ray1``: one worker), then a second node of one CPU joined to it (``ray2``: two
workers, one per node, placed by SPREAD); ``local1`` / ``local2`` are one and two local worker
processes. A rate is accurate when every planned request completed, the schedule lag p99 (sent −
intended) is within 5 ms and the TTFT error p99 (client TTFT − the server's own, matched by
request id) within 5 ms; the accurate rate is the highest rate of the ladder up to which every
rate was accurate.

On one host both Ray nodes share its two cores with the coordinator, the Ray daemons and the
server, so ``ray2 / ray1`` shows what the Ray path costs here, not what a second host gains; the
gain needs a second machine. CPU is not compared: the actors are Ray's processes, outside the
measured ``speclab`` process tree.

    .venv/bin/python bench/bench_ray.py [--rates 50,100,200,300] [--duration 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload, planned, write_scenario
from loadgen_procs import run_measured
from loadgen_runs import ServerConfig, TruthServer, read_recording, speclab_argv
from loadgen_truth import match, percentile

from tests.cluster.ray_nodes import RayCluster, start_cluster

LAG_LIMIT_MS = ERROR_LIMIT_MS = 5.0
CONFIGS = ("local1", "ray1", "local2", "ray2")


@dataclass
class Row:
    config: str
    rate: float
    planned: int
    ok: int
    lag_p99_ms: float
    err_p99_ms: float
    exit_code: int
    wall_s: float

    @property
    def accurate(self) -> bool:
        return self.ok == self.planned and self.lag_p99_ms <= LAG_LIMIT_MS and self.err_p99_ms <= ERROR_LIMIT_MS


def run_one(config: str, work: Workload, cluster: RayCluster | None, workdir: Path) -> Row:
    run_dir = workdir / f"{config}-r{work.rate:g}"
    run_dir.mkdir(parents=True, exist_ok=True)
    scenario = write_scenario(run_dir / "scenario.toml", f"rb-{config}-r{work.rate:g}", work)
    plan = planned(scenario)
    workers = int(config[-1])
    began = time.monotonic()
    server = TruthServer(ServerConfig(), run_dir / "server.json", run_dir / "server.log")
    try:
        argv = speclab_argv(scenario, server.url, workers, run_dir / "recording", run_dir / "report")
        if cluster is not None:
            argv += ["--cluster", cluster.address]
        with open(run_dir / "client.log", "w", encoding="utf-8") as log:
            measured = run_measured(argv, log=log, timeout_s=work.duration_s + 180.0)
    finally:
        truth = server.stop()
    records = read_recording(run_dir / "recording")[0] if (run_dir / "recording" / "requests.jsonl").exists() else []
    pairs = match(records, truth.records)
    lags = [(r.sent - r.intended) * 1000.0 for r in records if r.sent is not None]
    return Row(config, work.rate, len(plan), sum(r.ok for r in records), percentile(lags, 99),
               percentile([p.error * 1000.0 for p in pairs], 99), measured.returncode, time.monotonic() - began)


def accurate_rate(rows: list[Row], config: str) -> float:
    best = 0.0
    for row in sorted((r for r in rows if r.config == config), key=lambda r: r.rate):
        if not row.accurate:
            break
        best = row.rate
    return best


def _f(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,100,200,300")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' files here")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-ray-"))
    rows: list[Row] = []
    cluster = start_cluster(nodes=1)
    try:
        for config in CONFIGS:
            if config == "ray2":
                cluster.add_node()
            for rate in rates:
                row = run_one(config, Workload(rate=rate, duration_s=args.duration), cluster if config.startswith("ray") else None, workdir)
                rows.append(row)
                print(f"{row.config:7} {row.rate:6g}/s  ok {row.ok}/{row.planned}  lag p99 {_f(row.lag_p99_ms)} ms  "
                      f"TTFT error p99 {_f(row.err_p99_ms)} ms  exit {row.exit_code}  {row.wall_s:.0f} s  "
                      f"{'accurate' if row.accurate else 'NOT accurate'}", flush=True)
    finally:
        cluster.stop()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    best = {config: accurate_rate(rows, config) for config in CONFIGS}
    print(f"\naccurate rate (every request completed, schedule lag p99 and TTFT error p99 within "
          f"{LAG_LIMIT_MS:g} ms; ladder {args.rates} req/s, {args.duration:g} s each):")
    for config in CONFIGS:
        print(f"  {config:7} {best[config]:g} req/s")

    def ratio(a: str, b: str) -> str:
        return f"{best[a] / best[b]:.2f}" if best[b] else "–"

    print(f"ratios: ray1/local1 {ratio('ray1', 'local1')}, ray2/local2 {ratio('ray2', 'local2')}, "
          f"ray2/ray1 {ratio('ray2', 'ray1')}")
    print("On one host the two Ray nodes share its cores: ray2/ray1 is the Ray path's overhead here, not the "
          "gain of a second host.")


if __name__ == "__main__":
    main()
