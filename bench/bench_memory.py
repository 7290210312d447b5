"""Does speclab's memory stay flat over a long run? RSS after the first minute against the end.

Runs ``speclab run`` exactly as a user does (``--attach`` bench_loadgen's ground-truth server,
``--record``, ``--report``) at RATE for DURATION seconds and samples, once a second from
``/proc``, the RSS of speclab's parent process (where records are aggregated and recorded) and
of its whole tree (workers included). Prints both at 60 s and at the end and their ratio: the
parent must keep nothing per request, so the ratio should stay within 1.10.

    .venv/bin/python bench/bench_memory.py [--rate 200] [--duration 600]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload, write_scenario
from loadgen_procs import _stat, tree
from loadgen_runs import ServerConfig, TruthServer, speclab_argv

MARK_S = 60.0


def rss_mb(pids: list[int]) -> float:
    return sum(stat[1] for pid in pids if (stat := _stat(pid)) is not None) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        work = Workload(args.rate, args.duration, 7)
        scenario = write_scenario(Path(tmp) / "memory.toml", "mem", work)
        server = TruthServer(ServerConfig(50.0, 10.0, 64), Path(tmp) / "server.json", Path(tmp) / "server.log")
        argv = speclab_argv(scenario, server.url, args.workers, Path(tmp) / "rec", Path(tmp) / "report")
        samples: list[tuple[float, float, float]] = []  # (seconds since start, parent MB, tree MB)
        with open(Path(tmp) / "speclab.log", "w", encoding="utf-8") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            began = time.monotonic()
            try:
                while proc.poll() is None:
                    samples.append((time.monotonic() - began, rss_mb([proc.pid]), rss_mb(tree(proc.pid))))
                    time.sleep(1.0)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                truth = server.stop()
        tail = (Path(tmp) / "speclab.log").read_text().strip().splitlines()[-1:]
    traffic = [s for s in samples if s[0] <= args.duration + 5.0]
    if not traffic or traffic[-1][0] < MARK_S:
        raise SystemExit(f"the run ended after {samples[-1][0] if samples else 0:.0f} s, before {MARK_S:g} s: {tail}")
    mark = min(traffic, key=lambda s: abs(s[0] - MARK_S))
    end = traffic[-1]
    peak = max(s[1] for s in traffic)
    print(f"speclab run at {args.rate:g} req/s for {args.duration:g} s, {args.workers} worker(s); "
          f"{len(truth.records)} requests reached the server; speclab's last line: {tail[0] if tail else '-'}")
    print(f"{'':<12}{'at ' + format(mark[0], '.0f') + ' s':>12}{'at ' + format(end[0], '.0f') + ' s':>12}{'ratio':>8}")
    print(f"{'parent MB':<12}{mark[1]:>12.1f}{end[1]:>12.1f}{end[1] / mark[1]:>8.3f}   (peak {peak:.1f})")
    print(f"{'tree MB':<12}{mark[2]:>12.1f}{end[2]:>12.1f}{end[2] / mark[2]:>8.3f}")
    print(f"target: the end within 10% of the first minute: {'met' if end[1] <= 1.10 * mark[1] else 'missed'}")


if __name__ == "__main__":
    main()
