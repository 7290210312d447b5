"""How much load the simulator sustains on this host while keeping its modelled step times.

Starts ``python -m speclab.sim`` (or ``--module``), measures the time to a healthy /health, then
ramps closed-loop concurrency with a plain aiohttp streaming client. Per level it prints completed
requests, output tokens/s (from usage), and the simulator's ``speclab_sim_clock_drift_seconds``
sampled at 20 Hz (p50 / p90 / max). Each level runs ``--repeats`` times (old and new alternating
every time); a level passes when the median of its runs' p90 drift stays under ``--drift-ms`` (the
client shares the host's cores, so single samples and single runs spike), and "sustained" is the
highest level at which it and every lower level pass.

``--baseline DIR`` runs the same levels, in the same run, against a simulator started from another
checkout (``git worktree add DIR COMMIT``; started with DIR as its working directory and
PYTHONPATH, so it imports DIR's ``speclab``), alternating old and new at every level, and prints
both sustained levels and their ratio. Only one simulator has load at a time.

    .venv/bin/python bench/bench_sim.py sim-8b --levels 1,8,32,64 --seconds 4 \
        --sim-args "--speculative-config '{\"model\": \"sim-1b\", \"num_speculative_tokens\": 3}'"
    git worktree add /tmp/sim-old main
    .venv/bin/python bench/bench_sim.py sim-8b --levels 8,16,24,32,48,64,96,128 --baseline /tmp/sim-old \
        --sim-args "--max-num-seqs 256 --speculative-config '{\"model\": \"sim-1b\", \"num_speculative_tokens\": 4}'"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


class BenchError(RuntimeError):
    """The simulator answered something a healthy one does not."""


def _check(r: aiohttp.ClientResponse, what: str) -> None:
    if r.status != 200:
        raise BenchError(f"{r.url.host}:{r.url.port} answered HTTP {r.status} to {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> float:
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s:
        while time.perf_counter() - t0 < timeout:
            if proc.poll() is not None:
                raise SystemExit(f"simulator exited with {proc.returncode}")
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.01)
    raise SystemExit("simulator never became healthy")


async def drift_sampler(url: str, out: list[float], stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as s:
        while not stop.is_set():
            async with s.get(url + "/metrics") as r:
                _check(r, "GET /metrics")
                for line in (await r.text()).splitlines():
                    if line.startswith("speclab_sim_clock_drift_seconds "):
                        out.append(float(line.split()[1]))
            await asyncio.sleep(0.05)


async def worker(s: aiohttp.ClientSession, url: str, body: dict[str, object], deadline: float,
                 totals: list[int]) -> None:
    while time.perf_counter() < deadline:
        async with s.post(url + "/v1/completions", json=body) as r:
            _check(r, "POST /v1/completions")
            async for raw in r.content:
                line = raw.decode().strip()
                if line.startswith("data: {") and '"usage"' in line:
                    usage = json.loads(line[6:])["usage"]
                    totals[0] += 1
                    totals[1] += usage["completion_tokens"]


async def level(url: str, concurrency: int, seconds: float, max_tokens: int) -> tuple[int, float, list[float]]:
    body = {"prompt": "Write a long story about a lighthouse keeper.", "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    totals = [0, 0]
    drift: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(drift_sampler(url, drift, stop))
    conn = aiohttp.TCPConnector(limit=concurrency + 4)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=conn) as s:
        await asyncio.gather(*(worker(s, url, body, t0 + seconds, totals) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    stop.set()
    await sampler
    return totals[0], totals[1] / elapsed, drift


def start(tree: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL)


def package_of(tree: Path) -> str:
    """Where ``speclab`` is imported from when the simulator runs in ``tree`` (so a baseline is what it says)."""
    out = subprocess.run([sys.executable, "-c", "import speclab; print(speclab.__file__)"], cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True)
    return str(Path(out.stdout.strip()).parent)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="sim-8b")
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--drift-ms", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each level per engine (the median p90 judges it)")
    ap.add_argument("--module", default="speclab.sim", help="e.g. tests.sim_server.fake_main")
    ap.add_argument("--sim-args", default="", help="extra simulator flags, one string")
    ap.add_argument("--baseline", type=Path, help="another checkout to run side by side (the old engine)")
    a = ap.parse_args()
    trees = {"new": ROOT}
    if a.baseline is not None:
        if not (a.baseline / "speclab" / "sim").is_dir():
            raise SystemExit(f"--baseline {a.baseline}: no speclab/sim package there")
        trees = {"old": a.baseline.resolve(), "new": ROOT}
    extra = shlex.split(a.sim_args)
    urls: dict[str, str] = {}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, tree in trees.items():
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", a.module, a.model, "--host", "127.0.0.1", "--port", str(port), *extra]
            procs[name] = start(tree, argv)
            ready = await wait_healthy(urls[name], procs[name], 60)
            print(f"{name}: {package_of(tree)}")
            print(f"{name}: simulator: {' '.join(argv[2:])}")
            print(f"{name}: start-up to healthy /health: {ready:.2f} s")
        print(f"{'engine':>6} {'concurrency':>11} {'requests':>9} {'tokens/s':>10} {'drift p50 ms':>13} {'p90 ms':>8} "
              f"{'max ms':>8}")
        sustained: dict[str, tuple[int, float] | None] = {name: None for name in trees}
        failed: set[str] = set()
        for c in (int(x) for x in a.levels.split(",")):
            p90s: dict[str, list[float]] = {name: [] for name in trees}
            rates: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(a.repeats):
                for name in trees:
                    done, tps, drift = await level(urls[name], c, a.seconds, a.max_tokens)
                    ordered = sorted(drift) or [float("nan")]
                    p50 = statistics.median(ordered) * 1e3
                    p90 = ordered[int(0.9 * (len(ordered) - 1))] * 1e3
                    mx = ordered[-1] * 1e3
                    print(f"{name:>6} {c:>11} {done:>9} {tps:>10.0f} {p50:>13.2f} {p90:>8.2f} {mx:>8.2f}", flush=True)
                    p90s[name].append(p90 if drift and done else float("inf"))  # nothing served fails
                    rates[name].append(tps)
            for name in trees:
                med, tps = statistics.median(p90s[name]), statistics.median(rates[name])
                ok = med < a.drift_ms
                print(f"{name:>6} {c:>11} median of {a.repeats}: p90 drift {med:.2f} ms, {tps:.0f} tokens/s: "
                      f"{'pass' if ok else 'FAIL'}", flush=True)
                if not ok:
                    failed.add(name)
                elif name not in failed:
                    sustained[name] = (c, tps)
        for name, best in sustained.items():
            if best:
                print(f"{name}: sustained (this level and every lower one: median p90 drift < {a.drift_ms} ms): "
                      f"{best[0]} concurrent sequences, "
                      f"{best[1]:.0f} output tokens/s")
            else:
                print(f"{name}: no level kept p90 drift under {a.drift_ms} ms")
        old, new = sustained.get("old"), sustained.get("new")
        if a.baseline is not None and old and new:
            print(f"new / old sustained sequences: {new[0] / old[0]:.2f}x (tokens/s at those levels: "
                  f"{new[1] / old[1]:.2f}x)")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=10)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        raise SystemExit("bench_sim: interrupted; the rows printed above were measured") from None
    except (BenchError, aiohttp.ClientError, OSError) as exc:
        raise SystemExit(f"bench_sim: {type(exc).__name__}: {exc}; the rows printed above were measured") from None
