"""The accurate rate of speclab's traffic workers, local processes beside Ray actors on 1 and 2 nodes.

The same Poisson plans as ``bench_loadgen.py`` (its ground-truth server in its own process:
vLLM-shaped SSE, 64 tokens, 50 ms to the first, 10 ms each), fired by ``speclab run --attach URL``
with local workers and with ``--cluster`` on a real Ray cluster started here on 127.0.0.1: one
node with one CPU (``ray1``: one worker), then a second node of one CPU joined to it (``ray2``: two
workers, one per node, placed by SPREAD); ``local1`` / ``local2`` are one and two local worker
processes.

A rate is accurate when every planned request completed and, over the requests planned after the
first ``--warmup`` second (connections opening; speclab's own tables leave warm-up out too), the
schedule lag p99 (sent − intended) is within ``--lag-limit`` ms (8: speclab's schedule-lag health
limit) and the TTFT error p99 (client TTFT − the server's own, matched by request id) within
``--error-limit`` ms (10). The accurate rate is the highest rate of the ladder up to which every
rate was accurate. Each p99 should be over a few hundred requests: below 50/s an 8 s run has under
400, and its p99 is one or two requests' worst. The 5 ms columns (whole run, warm-up included) are
printed beside it, the stricter reading the first version of this bench used.

On one host both Ray nodes share its two cores with the coordinator, the Ray daemons and the
server, so ``ray2 / ray1`` shows what the Ray path costs here, not what a second host gains; the
gain needs a second machine. ``ray CPU`` is what every process of the Ray cluster (daemons,
Ray Client servers, actors) used during the row, sampled from /proc every 0.25 s, in cores: during
the local rows it is the idle daemons' share, taken from the client and server.

    .venv/bin/python bench/bench_ray.py [--rates 50,100,200] [--duration 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload, planned, write_scenario
from loadgen_procs import _stat, run_measured, tree
from loadgen_runs import ServerConfig, TruthServer, read_recording, speclab_argv
from loadgen_truth import match, percentile

from tests.cluster.ray_nodes import RayCluster, start_cluster

STRICT_MS = 5.0
CONFIGS = ("local1", "ray1", "local2", "ray2")


@dataclass(frozen=True)
class Criterion:
    warmup_s: float = 1.0
    lag_ms: float = 8.0
    error_ms: float = 10.0


class ClusterCpu:
    """CPU seconds of every process of the Ray cluster, those that exited kept at their last sample."""

    def __init__(self, cluster: RayCluster, period: float = 0.25) -> None:
        self.cluster, self.period = cluster, period
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for node in list(self.cluster.nodes):
            for pid in tree(node.proc.pid):
                stat = _stat(pid)
                if stat is not None:
                    self._last[pid] = stat[0]

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def total(self) -> float:
        self._sample()
        return sum(self._last.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


@dataclass
class Row:
    config: str
    rate: float
    planned: int
    ok: int
    lag_p99_ms: float  # after the warm-up
    err_p99_ms: float
    whole_lag_p99_ms: float  # every request
    whole_err_p99_ms: float
    exit_code: int
    wall_s: float
    ray_cores: float

    def accurate(self, criterion: Criterion) -> bool:
        return self.ok == self.planned and self.lag_p99_ms <= criterion.lag_ms and self.err_p99_ms <= criterion.error_ms

    @property
    def strict(self) -> bool:
        return self.ok == self.planned and max(self.whole_lag_p99_ms, self.whole_err_p99_ms) <= STRICT_MS


def run_one(config: str, work: Workload, cluster: RayCluster | None, cpu: ClusterCpu | None, workdir: Path,
            criterion: Criterion) -> Row:
    run_dir = workdir / f"{config}-r{work.rate:g}"
    run_dir.mkdir(parents=True, exist_ok=True)
    scenario = write_scenario(run_dir / "scenario.toml", f"rb-{config}-r{work.rate:g}", work)
    plan = planned(scenario)
    workers = int(config[-1])
    began, cpu0 = time.monotonic(), cpu.total() if cpu is not None else 0.0
    server = TruthServer(ServerConfig(), run_dir / "server.json", run_dir / "server.log")
    try:
        argv = speclab_argv(scenario, server.url, workers, run_dir / "recording", run_dir / "report")
        if cluster is not None:
            argv += ["--cluster", cluster.address]
        with open(run_dir / "client.log", "w", encoding="utf-8") as log:
            measured = run_measured(argv, log=log, timeout_s=work.duration_s + 180.0)
    finally:
        truth = server.stop()
    wall = time.monotonic() - began
    ray_cores = (cpu.total() - cpu0) / wall if cpu is not None else 0.0
    records = read_recording(run_dir / "recording")[0] if (run_dir / "recording" / "requests.jsonl").exists() else []
    pairs = match(records, truth.records)
    start = min((r.intended for r in records), default=0.0)
    after = {r.request_id for r in records if r.intended - start >= criterion.warmup_s}
    late = [p for p in pairs if p.request_id in after]
    return Row(config, work.rate, len(plan), sum(r.ok for r in records),
               percentile([p.lag * 1000.0 for p in late], 99), percentile([p.error * 1000.0 for p in late], 99),
               percentile([p.lag * 1000.0 for p in pairs], 99), percentile([p.error * 1000.0 for p in pairs], 99),
               measured.returncode, wall, ray_cores)


def accurate_rate(rows: list[Row], config: str, ok: Callable[[Row], bool]) -> float:
    best = 0.0
    for row in sorted((r for r in rows if r.config == config), key=lambda r: r.rate):
        if not ok(row):
            break
        best = row.rate
    return best


def _f(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,100,200")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=Criterion.warmup_s, help="seconds of the plan left out")
    parser.add_argument("--lag-limit", type=float, default=Criterion.lag_ms, help="schedule lag p99, ms")
    parser.add_argument("--error-limit", type=float, default=Criterion.error_ms, help="TTFT error p99, ms")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' files here")
    args = parser.parse_args()
    criterion = Criterion(args.warmup, args.lag_limit, args.error_limit)
    rates = [float(r) for r in args.rates.split(",")]
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-ray-"))
    rows: list[Row] = []
    cluster = start_cluster(nodes=1)
    cpu = ClusterCpu(cluster)
    try:
        for config in CONFIGS:
            if config == "ray2":
                cluster.add_node()
            for rate in rates:
                row = run_one(config, Workload(rate=rate, duration_s=args.duration),
                              cluster if config.startswith("ray") else None, cpu, workdir, criterion)
                rows.append(row)
                print(f"{row.config:7} {row.rate:6g}/s  ok {row.ok}/{row.planned}  after {criterion.warmup_s:g} s: "
                      f"lag p99 {_f(row.lag_p99_ms)} ms, TTFT error p99 {_f(row.err_p99_ms)} ms  "
                      f"(whole run {_f(row.whole_lag_p99_ms)} / {_f(row.whole_err_p99_ms)})  exit {row.exit_code}  "
                      f"ray CPU {row.ray_cores:.2f} cores  {row.wall_s:.0f} s  "
                      f"{'accurate' if row.accurate(criterion) else 'NOT accurate'}", flush=True)
    finally:
        cpu.close()
        cluster.stop()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    best = {config: accurate_rate(rows, config, lambda r: r.accurate(criterion)) for config in CONFIGS}
    strict = {config: accurate_rate(rows, config, lambda r: r.strict) for config in CONFIGS}
    print(f"\naccurate rate (every request completed; after the first {criterion.warmup_s:g} s, schedule lag p99 "
          f"<= {criterion.lag_ms:g} ms and TTFT error p99 <= {criterion.error_ms:g} ms; ladder {args.rates} req/s, "
          f"{args.duration:g} s each), beside the strict reading (whole run, both <= {STRICT_MS:g} ms):")
    for config in CONFIGS:
        print(f"  {config:7} {best[config]:g} req/s   strict {strict[config]:g} req/s")

    def ratio(a: str, b: str) -> str:
        return f"{best[a] / best[b]:.2f}" if best[b] else "–"

    print(f"ratios: ray1/local1 {ratio('ray1', 'local1')}, ray2/local2 {ratio('ray2', 'local2')}, "
          f"ray2/ray1 {ratio('ray2', 'ray1')}")
    print("On one host the two Ray nodes share its cores: ray2/ray1 is the Ray path's overhead here, not the "
          "gain of a second host.")


if __name__ == "__main__":
    main()
