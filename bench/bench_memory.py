"""Does speclab's memory stay flat over a long run? RSS after the first minute against the end.

``run`` mode (the default) runs ``speclab run`` exactly as a user does (``--attach``
bench_loadgen's ground-truth server, ``--record``, ``--report``) at RATE for DURATION seconds.
``accept`` mode runs ``speclab accept default --stages canary`` on the simulators with the quick
profile's canary stretched to RATE requests per second per variant for DURATION seconds (a gates
file written for the run), recorded and reported.

Both sample, once a second from ``/proc``, the RSS of speclab's parent process (where records are
aggregated, judged and recorded) and of its whole tree (workers, and in accept mode the
simulators). Printed: both every minute, at 60 s and at the end of traffic (the last sample
before speclab starts writing its report), their ratio, and the peak while the report is written.
The parent must keep nothing per request, so the ratio should stay within 1.10.

    .venv/bin/python bench/bench_memory.py [--mode run|accept] [--rate 200] [--duration 600]
"""

from __future__ import annotations

import argparse
import re
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

from speclab.model.paths import BUNDLED

MARK_S = 60.0
# The first line speclab prints once traffic is over: run's "report: ...", accept's stage verdict
# ("stage canary: PASS in ..."; its "stage canary: running" comes before the traffic).
REPORTING = re.compile(r"^(report:|stage canary: (?!running))", re.M)

Sample = tuple[float, float, float]  # (seconds since start, parent MB, tree MB)


def rss_mb(pids: list[int]) -> float:
    return sum(stat[1] for pid in pids if (stat := _stat(pid)) is not None) / 2**20


def follow(argv: list[str], log_path: Path) -> tuple[list[Sample], float | None]:
    """Run speclab, sampling RSS once a second; also when it began reporting (seconds since start)."""
    samples: list[Sample] = []
    reporting: float | None = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        began = time.monotonic()
        try:
            while proc.poll() is None:
                samples.append((time.monotonic() - began, rss_mb([proc.pid]), rss_mb(tree(proc.pid))))
                if reporting is None and REPORTING.search(log_path.read_text(errors="replace")):
                    reporting = samples[-1][0]
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return samples, reporting


def nearest(samples: list[Sample], t: float) -> Sample:
    return min(samples, key=lambda s: abs(s[0] - t))


def accept_gates(path: Path, rate: float, duration: float) -> Path:
    """The bundled gates with the quick profile's canary at ``rate`` per variant for ``duration``."""
    text = (BUNDLED / "gates.toml").read_text()
    quick = "[profiles.quick.canary]\nrequests = 48\nrate = 8.0\n"
    if quick not in text:
        raise SystemExit("the bundled gates.toml's quick canary changed; update bench_memory.accept_gates")
    path.write_text(text.replace(quick, f"[profiles.quick.canary]\nrequests = {round(rate * duration)}\nrate = {rate:g}\n"))
    return path


def run_mode(args: argparse.Namespace, tmp: Path) -> tuple[list[Sample], float | None, str]:
    work = Workload(args.rate, args.duration, 7)
    scenario = write_scenario(tmp / "memory.toml", "mem", work)
    server = TruthServer(ServerConfig(50.0, 10.0, 64), tmp / "server.json", tmp / "server.log")
    try:
        argv = speclab_argv(scenario, server.url, args.workers, tmp / "rec", tmp / "report")
        samples, reporting = follow(argv, tmp / "speclab.log")
    finally:
        truth = server.stop()
    return samples, reporting, f"{len(truth.records)} requests reached the server"


def accept_mode(args: argparse.Namespace, tmp: Path) -> tuple[list[Sample], float | None, str]:
    gates = accept_gates(tmp / "gates.toml", args.rate, args.duration)
    exe = Path(sys.executable).with_name("speclab")
    argv = [str(exe), "accept", "default", "--stages", "canary", "--gates", str(gates), "--engine", "sim",
            "--record", str(tmp / "rec"), "--report", str(tmp / "report"), "--force"]
    samples, reporting = follow(argv, tmp / "speclab.log")
    sent = re.search(r'"requests_sent": (\d+)', (tmp / "report" / "report.json").read_text()) \
        if (tmp / "report" / "report.json").exists() else None
    return samples, reporting, f"{sent.group(1) if sent else '?'} requests sent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["run", "accept"], default="run")
    parser.add_argument("--rate", type=float, default=200.0, help="req/s (per variant in accept mode)")
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as name:
        tmp = Path(name)
        samples, reporting, what = (run_mode if args.mode == "run" else accept_mode)(args, tmp)
        tail = (tmp / "speclab.log").read_text().strip().splitlines()[-1:]
    traffic = [s for s in samples if reporting is None or s[0] < reporting]
    if not traffic or traffic[-1][0] < MARK_S + 10:
        raise SystemExit(f"the run ended after {samples[-1][0] if samples else 0:.0f} s, before {MARK_S + 10:g} s: {tail}")
    mark = nearest(traffic, MARK_S)
    end = traffic[-1]
    after = max((s[1] for s in samples if s[0] >= end[0]), default=end[1])
    print(f"speclab {args.mode} at {args.rate:g} req/s{' per variant' if args.mode == 'accept' else ''} for "
          f"{args.duration:g} s, {args.workers} worker(s); {what}; speclab's last line: {tail[0] if tail else '-'}")
    minutes = [nearest(traffic, 60.0 * m) for m in range(1, int(end[0] // 60) + 1)]
    print("every minute (s: parent MB / tree MB): " + ", ".join(
        f"{t:.0f}: {p:.1f} / {tr:.1f}" for t, p, tr in [*minutes, end]))
    print(f"{'':<12}{'at ' + format(mark[0], '.0f') + ' s':>12}{'at ' + format(end[0], '.0f') + ' s':>12}{'ratio':>8}")
    print(f"{'parent MB':<12}{mark[1]:>12.1f}{end[1]:>12.1f}{end[1] / mark[1]:>8.3f}   "
          f"(peak while reporting {after:.1f})")
    print(f"{'tree MB':<12}{mark[2]:>12.1f}{end[2]:>12.1f}{end[2] / mark[2]:>8.3f}")
    print(f"target: the parent at the end within 10% of the first minute: {'met' if end[1] <= 1.10 * mark[1] else 'missed'}")


if __name__ == "__main__":
    main()
