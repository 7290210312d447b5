"""How accurate and how costly is speclab's load generator, next to the best plain Python client?

Measured as an outside observer would. A ground-truth streaming server (``loadgen_server.py``, its
own process, vLLM-shaped SSE: 64 tokens, 50 ms to the first, then 10 ms each) records per
``X-Request-Id`` the kernel's receive time of the request and the moment it wrote the first token
chunk. At each rate the same Poisson plan (fixed seed, 32-word prompts) is fired, one client at a
time, each against a fresh server, by:

- ``speclab1`` / ``speclab2``: ``speclab run SCENARIO --attach URL --workers N --record DIR``, as a
  user runs it (parent and workers in the measured tree; figures from its recording);
- ``uvloop``: a minimal aiohttp streaming client on uvloop sleeping until each absolute send time;
- ``asyncio``: the same client on the stock event loop, for reference.

TTFT error = client TTFT (first token read − sent) − the server's TTFT (first chunk written −
request received), matched by request id: what the client adds, from its send to its read of the
first chunk. Schedule lag = sent − intended. CPU = the client's whole process tree over the
traffic (first request received to last ``[DONE]`` written, per request the server finished),
sampled from ``/proc``; "life" is the kernel's total for the tree at exit (start-up included).
Peak RSS is the tree's sum. Ratios are speclab over the uvloop client at the same rate.

    .venv/bin/python bench/bench_loadgen.py [--rates 100,200,300,400,500] [--duration 20]
        [--clients speclab1,speclab2,uvloop,asyncio] [--repeat N] [--json OUT] [--keep DIR]

With ``--repeat N`` each client runs N times at each rate, the order reversed every other round
(A B, B A, ...) so a neighbour's burst or a drift of the host's speed falls on both; the compact
table and the ratios take each client's median over its runs. A rate where the uvloop client's
own schedule lag p99 is above ``SATURATED_LAG_MS`` saturates the host for the best plain client
too: its ratios are printed, but it is no accuracy target.

Quote figures only from a run under ``flock -x`` on the CPU lock with the host otherwise quiet
(the "others" column: CPU seconds the rest of the host used during the run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_plan import Workload
from loadgen_runs import RunResult, ServerConfig, is_speclab, run_client
from loadgen_truth import interval_truth, match, percentile, score_flag

CLIENTS = ("speclab1", "speclab2", "uvloop", "asyncio")
FLAG_THRESHOLD_MS = 5.0  # the accuracy a health flag should vouch for (speclab's schedule-lag limit)
ERROR_FACTOR, ERROR_SLACK_MS = 1.25, 1.0  # the accuracy target: error p99 <= 1.25x uvloop's + 1 ms
CPU_FACTOR = 1.1  # the cost target: CPU per request <= 1.1x uvloop's
SATURATED_LAG_MS = 5.0  # the uvloop client's lag p99 above which the host, not the client, sets the error
OTHERS_LIMIT = 0.1  # cores the rest of the host may use during a run before its row is marked not quiet
LAG_TAIL_S = 0.1  # the window's end after the last [DONE] written: the client reads it and records it


@dataclass
class Row:
    client: str
    rate: float
    planned: int
    reached: int  # requests the server saw
    recorded: int  # requests the client recorded
    ok: int  # recorded as completed
    err_p50_ms: float
    err_p99_ms: float
    err_max_ms: float
    lag_p99_ms: float
    cpu_per_1000: float
    cpu_life_s: float
    peak_rss_mb: float
    server_read_lag_p99_us: float
    server_cpu_pct: float
    others_cpu_s: float  # CPU the rest of the host used during the run
    exit_code: int
    wall_s: float = math.nan  # the run, server start to server stop
    flag_bad: int = 0
    flag_caught: int = 0
    flag_good: int = 0
    flag_false: int = 0
    schedule_gap_us: float = 0.0
    repeat: int = 0  # which run of this client at this rate
    runs: int = 1  # runs a median row stands for


def host_speed() -> float:
    """µs per ``HdrHistogram.record_value`` (pure Python), best of five: the host's speed right now.
    The published table this bench mirrors was measured where it took about 1.4 µs."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, 3_600_000_000, 3)
    best = math.inf
    for _ in range(5):
        began = time.perf_counter()
        for value in range(1000, 21000):
            hist.record_value(value)
        best = min(best, (time.perf_counter() - began) / 20000 * 1e6)
    return best


def evaluate(run: RunResult) -> Row:
    server = run.server.records
    pairs = match(run.records, server)
    errors = [p.error * 1000.0 for p in pairs]
    lags = [(r.sent - r.intended) * 1000.0 for r in run.records if r.sent is not None]
    finished = [s for s in server.values() if s.done_write is not None]
    samples = run.measured.samples
    if finished:
        start = min(s.rx_kernel for s in server.values())
        end = max(s.done_write for s in finished if s.done_write is not None) + LAG_TAIL_S
        cpu = samples.cpu_between(start, end)
        traffic_s = end - start
    else:
        cpu, traffic_s = math.nan, math.nan
    read_lags = [s.read_lag * 1e6 for s in server.values()]
    others = run.host_busy_s - run.measured.cpu_total_s - run.server.cpu_s
    row = Row(
        client=run.client, rate=run.work.rate, planned=run.planned, reached=len(server), recorded=len(run.records),
        ok=sum(r.ok for r in run.records), err_p50_ms=percentile(errors, 50), err_p99_ms=percentile(errors, 99),
        err_max_ms=max(errors, default=math.nan), lag_p99_ms=percentile(lags, 99),
        cpu_per_1000=cpu / len(finished) * 1000.0 if finished else math.nan, cpu_life_s=run.measured.cpu_total_s,
        peak_rss_mb=samples.peak_rss / 2**20, server_read_lag_p99_us=percentile(read_lags, 99),
        server_cpu_pct=100.0 * run.server.traffic_cpu_s / (traffic_s - LAG_TAIL_S) if finished else math.nan,
        others_cpu_s=others, exit_code=run.measured.returncode, schedule_gap_us=run.schedule_gap_s * 1e6,
        wall_s=run.wall_s,
    )
    if is_speclab(run.client):
        score = score_flag(interval_truth(pairs), run.flagged, FLAG_THRESHOLD_MS, min_requests=10)
        row.flag_bad, row.flag_caught = score.bad, score.caught
        row.flag_good, row.flag_false = score.good, score.false_alarms
    return row


def _f(value: float, digits: int = 1) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def print_table(rows: list[Row], work: Workload, server: ServerConfig, loads: list[float], speeds: list[float]) -> None:
    print(f"\nloopback, {server.tokens}-token streams, {server.ttft_ms:g} ms TTFT, {server.itl_ms:g} ms/token, "
          f"{work.prompt_words}-word prompts, Poisson seed {work.seed}, {work.duration_s:g} s per run; "
          f"{os.cpu_count()} CPUs; 1-min load before each rate: {', '.join(f'{x:.2f}' for x in loads)}; "
          f"host speed before each rate and at the end (µs per hdrh record_value; 1.4 where the published "
          f"figures were measured): {', '.join(f'{x:.2f}' for x in speeds)}")
    header = (f"{'client':<10}{'rate':>6}{'sent/planned':>14}{'ok':>7}{'err p50':>9}{'err p99':>9}{'err max':>9}"
              f"{'lag p99':>9}{'CPU s/1k':>10}{'life s':>8}{'RSS MB':>8}{'srv rd us':>10}{'srv CPU%':>9}"
              f"{'others':>8}{'exit':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.client:<10}{r.rate:>6g}{f'{r.reached}/{r.planned}':>14}{r.ok:>7}{_f(r.err_p50_ms, 2):>9}"
              f"{_f(r.err_p99_ms):>9}{_f(r.err_max_ms):>9}{_f(r.lag_p99_ms):>9}{_f(r.cpu_per_1000, 2):>10}"
              f"{r.cpu_life_s:>8.1f}{r.peak_rss_mb:>8.0f}{_f(r.server_read_lag_p99_us, 0):>10}"
              f"{_f(r.server_cpu_pct, 0):>9}{r.others_cpu_s:>8.1f}{r.exit_code:>6}")
    print("(ms unless noted; 'sent' = requests the server received; srv rd us = server read lag p99, "
          "kernel receive to its loop's read; others = CPU-s the rest of the host used during the run)")
    busy = [r for r in rows if r.others_cpu_s > OTHERS_LIMIT * r.wall_s]
    if busy:
        print(f"NOT QUIET: the rest of the host used more than {OTHERS_LIMIT:g} of a core during "
              + ", ".join(f"{r.client} at {r.rate:g}/s ({r.others_cpu_s:.1f} CPU-s in {r.wall_s:.0f} s)" for r in busy)
              + "; do not quote those rows")


def print_compact(rows: list[Row]) -> None:
    """The published table's shape: TTFT error p99 ms / CPU-s per 1000 requests, per client and rate."""
    rates = sorted({r.rate for r in rows})
    by = {(r.client, r.rate): r for r in rows}
    print(f"\n{'client':<10}" + "".join(f"{f'{rate:g}/s':>16}" for rate in rates) + f"{'peak RSS MB':>13}")
    for client in dict.fromkeys(r.client for r in rows):
        cells = []
        for rate in rates:
            r = by.get((client, rate))
            cells.append("–" if r is None else f"{_f(r.err_p99_ms)} / {_f(r.cpu_per_1000, 2)}")
        peak = max(r.peak_rss_mb for r in rows if r.client == client)
        print(f"{client:<10}" + "".join(f"{c:>16}" for c in cells) + f"{peak:>13.0f}")


def meets_targets(row: Row, base: Row) -> tuple[bool, bool]:
    """The load-generator targets against the uvloop client at the same rate: TTFT error p99 within
    ``ERROR_FACTOR``x + ``ERROR_SLACK_MS`` of its, CPU per request within ``CPU_FACTOR``x of its."""
    error_ok = row.err_p99_ms <= ERROR_FACTOR * base.err_p99_ms + ERROR_SLACK_MS
    cpu_ok = row.cpu_per_1000 <= CPU_FACTOR * base.cpu_per_1000
    return error_ok, cpu_ok


def medians(rows: list[Row]) -> list[Row]:
    """One row per client and rate: the median of each figure over its runs (the runs themselves
    when there is one each)."""
    groups: dict[tuple[str, float], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.client, r.rate), []).append(r)
    out = []
    for group in groups.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        figures = ("err_p50_ms", "err_p99_ms", "err_max_ms", "lag_p99_ms", "cpu_per_1000", "peak_rss_mb",
                   "others_cpu_s")
        values = {name: statistics.median(getattr(r, name) for r in group) for name in figures}
        out.append(replace(group[0], **values, runs=len(group), ok=min(r.ok for r in group),
                           exit_code=max(r.exit_code for r in group)))
    return out


def uvloop_saturated(base: Row) -> bool:
    return base.lag_p99_ms > SATURATED_LAG_MS


def print_ratios(rows: list[Row]) -> None:
    by = {(r.client, r.rate): r for r in rows}
    lines = []
    for r in rows:
        base = by.get(("uvloop", r.rate))
        if base is None or r.client == "uvloop":
            continue
        error_ok, cpu_ok = meets_targets(r, base)
        bound = ERROR_FACTOR * base.err_p99_ms + ERROR_SLACK_MS
        verdict = f"{_yes(error_ok)} (<= {_f(bound)} ms)" + (" *" if uvloop_saturated(base) else "")
        lines.append(f"{r.client:<10}{r.rate:>6g}{_ratio(r.err_p50_ms, base.err_p50_ms):>10}"
                     f"{_ratio(r.err_p99_ms, base.err_p99_ms):>10}{_ratio(r.lag_p99_ms, base.lag_p99_ms):>10}"
                     f"{_ratio(r.cpu_per_1000, base.cpu_per_1000):>10}{_ratio(r.peak_rss_mb, base.peak_rss_mb):>10}"
                     f"{verdict:>24}{_yes(cpu_ok):>11}")
    if lines:
        runs = max(r.runs for r in rows)
        print("\nratios to the uvloop client at the same rate" + (f" (medians over {runs} runs each)" if runs > 1 else "")
              + f"; targets: error p99 <= {ERROR_FACTOR:g}x uvloop's + {ERROR_SLACK_MS:g} ms, CPU per request <= "
              f"{CPU_FACTOR:g}x uvloop's\n"
              f"{'client':<10}{'rate':>6}{'err p50':>10}{'err p99':>10}{'lag p99':>10}{'CPU/1k':>10}{'RSS':>10}"
              f"{'error target':>24}{'CPU target':>11}")
        print("\n".join(lines))
        if any(uvloop_saturated(r) for r in rows if r.client == "uvloop"):
            print(f"* the uvloop client's own lag p99 is above {SATURATED_LAG_MS:g} ms at this rate: the host is "
                  "saturated for the plain client too, so the row is no accuracy target")


def _yes(ok: bool) -> str:
    return "met" if ok else "missed"


def _ratio(a: float, b: float) -> str:
    return "–" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}x"


def print_health(rows: list[Row]) -> None:
    mine = [r for r in rows if is_speclab(r.client)]
    if not mine:
        return
    print(f"\nspeclab's saturation flag against the truth (intervals of >= 10 requests; bad = true TTFT error "
          f"p99 > {FLAG_THRESHOLD_MS:g} ms)")
    for r in mine:
        print(f"{r.client:<10}{r.rate:>6g}  bad intervals flagged {r.flag_caught}/{r.flag_bad}, "
              f"accurate ones flagged {r.flag_false}/{r.flag_good}; recorded intended vs plan: "
              f"{_f(r.schedule_gap_us, 1)} us")


def print_sustained(rows: list[Row]) -> None:
    for client in dict.fromkeys(r.client for r in rows):
        best = None
        for r in sorted((r for r in rows if r.client == client), key=lambda r: r.rate):
            if not (r.ok == r.planned and r.err_p99_ms <= 5.0 and r.lag_p99_ms <= 5.0):
                break
            best = r.rate
        print(f"highest rate with every request done, error p99 and lag p99 <= 5 ms, {client}: "
              f"{'none of the rates tried' if best is None else f'{best:g} req/s'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100,200,300,400,500")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of traffic per run")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each client per rate, the order alternating")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="also write every row as JSON")
    parser.add_argument("--keep", type=Path, default=None, help="keep recordings, server records and logs here")
    parser.add_argument("--base-src", type=Path, default=None,
                        help="a source tree of speclab (an earlier commit, e.g. from git archive) run as clients baseN")
    args = parser.parse_args()
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rates: expected comma-separated numbers, got {args.rates!r}")
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in clients if c not in ("uvloop", "asyncio")
               and not c.removeprefix("speclab").isdigit() and not c.removeprefix("base").isdigit()]
    if unknown or not rates or any(r <= 0 for r in rates) or args.duration <= 0 or args.repeat < 1:
        parser.error(f"--clients: speclabN, baseN, uvloop or asyncio (got {', '.join(unknown) or 'none'}); "
                     "--rates, --duration and --repeat must be positive")
    if args.base_src is None and any(c.startswith("base") for c in clients):
        parser.error("--clients baseN: --base-src names the source tree they run")
    server = ServerConfig(args.ttft_ms, args.itl_ms, args.tokens)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-loadgen-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    loads: list[float] = []
    speeds: list[float] = []
    began = time.monotonic()
    failure = None  # what stopped the runs early: the rows measured before it are still reported
    try:
        for rate in rates:
            work = Workload(rate, args.duration, args.seed, args.endpoint, args.tokens, args.prompt_words)
            loads.append(os.getloadavg()[0])
            speeds.append(host_speed())
            for repeat, client in [(n, c) for n in range(args.repeat) for c in (clients if n % 2 == 0 else clients[::-1])]:
                row = evaluate(run_client(client, work, server, workdir, args.base_src, repeat))
                row.repeat = repeat
                rows.append(row)
                print(f"  {client} at {rate:g}/s: error p99 {_f(row.err_p99_ms)} ms, "
                      f"{_f(row.cpu_per_1000, 2)} CPU-s/1k, {row.reached}/{row.planned} sent, exit {row.exit_code}",
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        failure = "interrupted"
    except (RuntimeError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        if args.keep is None and failure is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if failure is not None:
        print(f"bench_loadgen: stopped after {len(rows)} runs: {failure} (logs and recordings kept in {workdir})",
              file=sys.stderr)
        if not rows:
            raise SystemExit(1)
    speeds.append(host_speed())
    print_table(rows, Workload(rates[0], args.duration, args.seed, args.endpoint, args.tokens, args.prompt_words),
                server, loads, speeds)
    combined = medians(rows)
    print_compact(combined)
    print_ratios(combined)
    print_health(rows)
    print_sustained(combined)
    print(f"(bench took {time.monotonic() - began:.0f} s)")
    if args.json is not None:
        by = {(r.client, r.rate): r for r in combined}
        targets = [{"client": r.client, "rate": r.rate, "error_bound_ms": ERROR_FACTOR * base.err_p99_ms + ERROR_SLACK_MS,
                    "error_met": met[0], "cpu_met": met[1], "uvloop_saturated": uvloop_saturated(base)}
                   for r in combined if r.client != "uvloop" and (base := by.get(("uvloop", r.rate))) is not None
                   for met in [meets_targets(r, base)]]
        args.json.write_text(json.dumps({"host_speed_us": speeds, "load_1min": loads, "rows": [asdict(r) for r in rows],
                                         "medians": [asdict(r) for r in combined], "targets": targets,
                                         "stopped_early": failure}, indent=1))
    if failure is not None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
