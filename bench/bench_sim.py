"""How much load the simulator sustains on this host while keeping its modelled step times.

Starts ``python -m speclab.sim`` (or ``--module``), measures the time to a healthy /health, then
ramps closed-loop concurrency with a plain aiohttp streaming client. Per level it prints completed
requests, output tokens/s (from usage), and the simulator's ``speclab_sim_clock_drift_seconds``
sampled at 20 Hz (p50 / p90 / max). "Sustained" is the highest level whose p90 drift stays under
``--drift-ms`` (the client shares the host's cores, so single samples spike).

    .venv/bin/python bench/bench_sim.py sim-8b --levels 1,8,32,64 --seconds 4 \
        --sim-args "--speculative-config '{\"model\": \"sim-1b\", \"num_speculative_tokens\": 3}'"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


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
                for line in (await r.text()).splitlines():
                    if line.startswith("speclab_sim_clock_drift_seconds "):
                        out.append(float(line.split()[1]))
            await asyncio.sleep(0.05)


async def worker(s: aiohttp.ClientSession, url: str, body: dict[str, object], deadline: float,
                 totals: list[int]) -> None:
    while time.perf_counter() < deadline:
        async with s.post(url + "/v1/completions", json=body) as r:
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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="sim-8b")
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--drift-ms", type=float, default=5.0)
    ap.add_argument("--module", default="speclab.sim", help="e.g. tests.sim_server.fake_main")
    ap.add_argument("--sim-args", default="", help="extra simulator flags, one string")
    a = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    extra = shlex.split(a.sim_args)
    argv = [sys.executable, "-m", a.module, a.model, "--host", "127.0.0.1", "--port", str(port), *extra]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        ready = await wait_healthy(url, proc, 60)
        print(f"simulator: {' '.join(argv[2:])}")
        print(f"start-up to healthy /health: {ready:.2f} s")
        print(f"{'concurrency':>11} {'requests':>9} {'tokens/s':>10} {'drift p50 ms':>13} {'p90 ms':>8} "
              f"{'max ms':>8}")
        sustained = None
        for c in (int(x) for x in a.levels.split(",")):
            done, tps, drift = await level(url, c, a.seconds, a.max_tokens)
            ordered = sorted(drift) or [float("nan")]
            p50 = statistics.median(ordered) * 1e3
            p90 = ordered[int(0.9 * (len(ordered) - 1))] * 1e3
            mx = ordered[-1] * 1e3
            print(f"{c:>11} {done:>9} {tps:>10.0f} {p50:>13.2f} {p90:>8.2f} {mx:>8.2f}")
            if drift and p90 < a.drift_ms:
                sustained = (c, tps)
        if sustained:
            print(f"sustained with p90 drift < {a.drift_ms} ms: {sustained[0]} concurrent sequences, "
                  f"{sustained[1]:.0f} output tokens/s")
        else:
            print(f"no level kept p90 drift under {a.drift_ms} ms")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
