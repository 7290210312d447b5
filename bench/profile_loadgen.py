"""Where speclab's load generator spends its CPU, per request and per chunk: py-spy on a running worker.

Runs ``speclab run`` (one worker) at RATE against bench_loadgen's ground-truth server, attaches
py-spy (``record --nonblocking``: the worker is never paused) to the traffic worker (or the
parent, ``--process parent``) for the middle of the run, and prints the process's CPU per request
and per streamed chunk over that window (from ``/proc``, with the request count from the server's
own records) and the functions that took the most of its busy samples, by own time and
including callees. py-spy is a public tool (``pip install py-spy``), not a speclab dependency.

    .venv/bin/python bench/profile_loadgen.py [--rate 300] [--duration 24] [--process worker|parent] [--top 25]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload, write_scenario
from loadgen_procs import _stat, tree
from loadgen_runs import ServerConfig, TruthServer, speclab_argv

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")
# Frames every sample of a thread sits under; their "including callees" share says nothing.
_ROOT_FILES = ("multiprocessing/", "threading.py", "asyncio/runners.py", "uvloop/__init__.py")
_ROOT_FUNCS = ("worker_main", "_run")  # speclab/traffic/worker.py's entry points


def is_root(name: str) -> bool:
    func = name.split(" (")[0]
    return func in _ROOT_FUNCS or any(part in file_of(name) for part in _ROOT_FILES)


def find_py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy not found: pip install py-spy (into this environment or on PATH)")
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pick(parent: int, which: str, deadline: float) -> int:
    """The speclab parent itself, or its traffic worker (the spawned child that is not the resource tracker)."""
    if which == "parent":
        return parent
    while time.monotonic() < deadline:
        for pid in tree(parent)[1:]:
            line = cmdline(pid)
            if "spawn_main" in line and "resource_tracker" not in line:
                return pid
        time.sleep(0.1)
    raise SystemExit("no traffic worker appeared")


def frame_name(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    short = "/".join(path.split("/")[-2:]) if "site-packages" in path or "/lib/" in path else path
    return f"{m.group('func')} ({short})"


def file_of(name: str) -> str:
    return name[name.rfind("(") + 1:-1] if name.endswith(")") else name


def summarise(raw: Path) -> tuple[int, Counter[str], Counter[str], Counter[str]]:
    """Busy samples, and per function its own samples and those including callees; per file its own."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    files: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [frame_name(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        files[file_of(frames[-1])] += count
        for name in set(frames):
            if not is_root(name):
                inclusive[name] += count
    return total, own, inclusive, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--duration", type=float, default=24.0, help="seconds of traffic; the middle is profiled")
    parser.add_argument("--process", choices=["worker", "parent"], default="worker")
    parser.add_argument("--sample-rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--keep", type=Path, default=None, help="keep the raw profile and the run's files here")
    args = parser.parse_args()
    if args.duration < 8 or args.rate <= 0:
        parser.error("--duration must be at least 8 s and --rate positive")
    py_spy = find_py_spy()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="profile-loadgen-"))
    workdir.mkdir(parents=True, exist_ok=True)
    work = Workload(args.rate, args.duration)
    scenario = write_scenario(workdir / "scenario.toml", f"lb-profile-r{args.rate:g}", work)
    server = TruthServer(ServerConfig(), workdir / "server.json", workdir / "server.log")
    raw = workdir / "profile.txt"
    window = args.duration - 6.0
    try:
        with open(workdir / "speclab.log", "w", encoding="utf-8") as log:
            proc = subprocess.Popen(speclab_argv(scenario, server.url, 1, workdir / "recording", workdir / "report"),
                                    stdout=log, stderr=subprocess.STDOUT)
            try:
                target = pick(proc.pid, args.process, time.monotonic() + 60)
                while not Path(workdir / "recording" / "requests.jsonl").exists():
                    time.sleep(0.1)  # the recording opens when traffic is about to start
                time.sleep(3.0)  # past the start: connections made, steady state
                begin_wall, begin = time.time(), _stat(target)
                subprocess.run([py_spy, "record", "--pid", str(target), "--duration", f"{window:g}", "--rate",
                                str(args.sample_rate), "--format", "raw", "--nonblocking", "--output", str(raw)],
                               check=True, capture_output=True)
                end_wall, end = time.time(), _stat(target)
            finally:
                proc.wait(args.duration + 120)
    finally:
        truth = server.stop()
    if begin is None or end is None:
        raise SystemExit("the profiled process ended during the window")
    cpu = end[0] - begin[0]
    served = [r for r in truth.records.values() if r.done_write is not None and begin_wall <= r.done_write < end_wall]
    chunks = sum(r.tokens for r in served) + 2 * len(served)  # token events + usage + [DONE]
    total, own, inclusive, files = summarise(raw)
    print(f"speclab {args.process} at {args.rate:g} req/s, profiled {end_wall - begin_wall:.1f} s of the middle: "
          f"{cpu:.2f} CPU-s for {len(served)} requests finished = {1000 * cpu / max(len(served), 1):.2f} ms per "
          f"request, {1e6 * cpu / max(chunks, 1):.1f} µs per SSE event ({chunks} events); {total} busy samples")
    print("\nown time by file (share of busy samples; asyncio/runners.py is uvloop's C loop under it: "
          "polling, socket reads and writes, timers)")
    for name, n in files.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print(f"\nown time by function, top {args.top}")
    for name, n in own.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print(f"\nincluding callees (below the loop and thread roots), top {args.top}")
    for name, n in inclusive.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"\nraw profile: {raw}")


if __name__ == "__main__":
    main()
