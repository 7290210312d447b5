"""What the HAProxy gateway costs, and how fast a live switch takes hold.

Starts the bundled lab's baseline and k4 simulators behind HAProxy (as `speclab gateway` does) and
measures, as the client sees it:
1. overhead: the same greedy request, alternately straight to the baseline server and through
   HAProxy (tenant A), N times: TTFT and e2e p50/p99 each way, their ratio, and the median gap
   between streamed chunks (equal gaps: the stream is not buffered);
2. a switch under load: open-loop traffic for tenant B (on k4) at RATE req/s; halfway through,
   `set B baseline` over the stats socket. Reported: how long the socket took, the last request
   sent after the command that still reached k4 (should be none), when the last k4 response
   finished (the drain), and errors (should be none);
3. rollback over the socket, REPS times: p50 / max of the time HAProxy took to apply it.

    .venv/bin/python bench/bench_gateway.py [--requests 60] [--rate 20] [--duration 6] [--reps 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speclab.gateway.config import find_haproxy
from speclab.gateway.launch import start_gateway
from speclab.gateway.routing import RoutingTable
from speclab.model.lab import load_lab
from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.traffic.client import Target, run_request
from speclab.traffic.health import percentile
from speclab.traffic.schedule import PlannedRequest, build_plan

TIMEOUT = aiohttp.ClientTimeout(total=120, sock_read=60)


def request(tenant: str, max_tokens: int) -> PlannedRequest:
    scenario = Scenario.model_validate({
        "name": "bench", "requests": 1, "arrival": {"process": "constant", "rate": 1},
        "classes": {"c": {"prompts": ["Tell me about the history of the sea and its ships."], "tenant": tenant,
                          "temperature": 0, "max_tokens": max_tokens}}})
    return build_plan(scenario).request(0)


async def overhead(gateway_url: str, direct_url: str, model: str, n: int) -> None:
    req = request("A", 48)
    via: list[RequestRecord] = []
    direct: list[RequestRecord] = []
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        for i in range(n):
            for url, sink in ((gateway_url, via), (direct_url, direct)) if i % 2 else (
                    (direct_url, direct), (gateway_url, via)):
                await run_request(session, Target("x", url, model), req, time.monotonic() - start, sink.append,
                                  run_start=start, timeout=TIMEOUT)
    for name, get in (("ttft", lambda r: r.ttft), ("e2e", lambda r: r.e2e)):
        a = [1000 * get(r) for r in direct if r.ok]
        b = [1000 * get(r) for r in via if r.ok]
        print(f"overhead {name}: direct p50 {percentile(a, 50):.2f} ms p99 {percentile(a, 99):.2f} ms | through HAProxy "
              f"p50 {percentile(b, 50):.2f} ms p99 {percentile(b, 99):.2f} ms | ratio p50 {percentile(b, 50) / percentile(a, 50):.3f}")

    def gaps(records: list[RequestRecord]) -> list[float]:
        """Mean gap between the socket reads that carried tokens, per response."""
        return [1000 * (r.last_token - r.first_token) / (r.token_reads - 1) for r in records
                if r.first_token is not None and r.last_token is not None and r.token_reads > 1]

    print(f"read gaps: direct median {statistics.median(gaps(direct)):.3f} ms, through HAProxy median "
          f"{statistics.median(gaps(via)):.3f} ms; token reads per response {direct[0].token_reads} / "
          f"{via[0].token_reads}; errors {sum(not r.ok for r in direct)} / {sum(not r.ok for r in via)}")


async def switch_under_load(gw_url: str, model: str, controller: object, rate: float, duration: float) -> None:
    from speclab.gateway.controller import GatewayController

    assert isinstance(controller, GatewayController)
    req = request("B", 32)
    records: list[RequestRecord] = []
    start = time.monotonic()
    flip: dict[str, float] = {}

    async def flip_at(at: float) -> None:
        await asyncio.sleep(at - (time.monotonic() - start))
        flip["command"] = time.monotonic() - start
        event = await controller.set("B", "baseline", who="bench")
        flip["applied_s"] = float(event.data["applied_s"])
        flip["returned"] = time.monotonic() - start

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(flip_at(duration / 2))]
        n = int(rate * duration)
        for i in range(n):
            due = i / rate
            await asyncio.sleep(max(0.0, due - (time.monotonic() - start)))
            tasks.append(asyncio.create_task(run_request(session, Target("gw", gw_url, model), req, due,
                                                         records.append, run_start=start, timeout=TIMEOUT)))
        await asyncio.gather(*tasks)
    k4 = [r for r in records if r.backend == "k4"]
    late = [r for r in k4 if r.sent is not None and r.sent > flip["returned"]]
    last_sent = max((r.sent or 0.0) for r in k4) - flip["command"] if k4 else float("nan")
    drain = max((r.done or 0.0) for r in k4) - flip["command"] if k4 else float("nan")
    print(f"switch under load ({rate:g} req/s for {duration:g} s, {len(records)} requests): socket applied it in "
          f"{1000 * flip['applied_s']:.2f} ms, call returned after {1000 * (flip['returned'] - flip['command']):.2f} ms; "
          f"requests sent after it returned that still reached k4: {len(late)}; last k4 request sent "
          f"{1000 * last_sent:+.1f} ms and last k4 response finished {1000 * drain:+.1f} ms from the command; "
          f"errors {sum(not r.ok for r in records)}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    lab = load_lab("default")
    routing = RoutingTable.from_lab(lab, variants=("baseline", "k4"))
    with tempfile.TemporaryDirectory(prefix="bench-gw-") as tmp:
        gw = await start_gateway(lab, routing, engine="sim", directory=Path(tmp), haproxy=find_haproxy())
        async with gw:
            model = gw.servers["baseline"].model_name or ""
            print(f"HAProxy {gw.state.haproxy_version} at {gw.url}; simulated servers (sim-8b, baseline and k4)")
            controller = await gw.controller(write_files=False)
            try:
                await overhead(gw.url, gw.state.servers["baseline"], model, args.requests)
                await switch_under_load(gw.url, model, controller, args.rate, args.duration)
                applied = []
                for _ in range(args.reps):
                    await controller.set("B", "k4", who="bench")
                    await controller.weight({"k4": 50}, who="bench")
                    applied.append(1000 * float((await controller.rollback(who="bench")).data["applied_s"]))
                print(f"rollback over the socket ({args.reps} times): p50 {percentile(applied, 50):.2f} ms, "
                      f"max {max(applied):.2f} ms")
            finally:
                await controller.close()


if __name__ == "__main__":
    asyncio.run(main())
