"""Where should a client stamp a chunk's arrival? Both stamps of every request, in one run.

speclab stamps each chunk as aiohttp's protocol feeds it to the response's reader
(``speclab.traffic.arrivals``), not where the coroutine reading the stream resumes, later in the
same loop turn. This bench takes both stamps of the first token of every request in the same run,
so the host's noise falls on both alike, and compares each with the ground-truth server
(``loadgen_server.py``: the kernel's receive time of the request and its own write of the first
chunk, matched by ``X-Request-Id``). The client is a plain aiohttp streaming loop on uvloop with
speclab's eager body writer, sleeping until each Poisson send time; every event is JSON-decoded.

    .venv/bin/python bench/bench_arrival_stamp.py [--rates 100,200,300,400] [--duration 10]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen_runs import MODEL, ServerConfig, TruthServer
from loadgen_truth import percentile

from speclab.traffic import eager_write
from speclab.traffic.arrivals import unwatch, watch
from speclab.traffic.sse import DONE, SSEParser

Stamps = tuple[float, float, float]  # sent, first token at the read, first token at the feed


async def one(session: aiohttp.ClientSession, url: str, rid: str, out: dict[str, Stamps]) -> None:
    body = orjson.dumps({"model": MODEL, "prompt": "hello " * 32, "max_tokens": 64, "stream": True})
    sent = time.monotonic()
    at_read = at_feed = None
    async with session.post(url + "/v1/completions", data=body,
                            headers={"Content-Type": "application/json", "X-Request-Id": rid}) as resp:
        arrivals = watch(resp.content, time.monotonic)
        parser = SSEParser()
        try:
            async for data in resp.content.iter_any():
                now = time.monotonic()
                for piece, fed in arrivals.split(data, now):
                    for payload in parser.feed(piece):
                        if payload == DONE:
                            continue
                        event = orjson.loads(payload)
                        if at_read is None and event["choices"] and event["choices"][0].get("text"):
                            at_read, at_feed = now, fed
        finally:
            unwatch(resp.content)
    if at_read is not None and at_feed is not None:
        out[rid] = (sent, at_read, at_feed)


async def fire(url: str, rate: float, duration: float, seed: int) -> dict[str, Stamps]:
    eager_write.install(asyncio.get_running_loop())
    out: dict[str, Stamps] = {}
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        t = time.monotonic() + 0.5
        end = t + duration
        while t < end:
            t += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, t - time.monotonic()))
            tasks.append(asyncio.ensure_future(one(session, url, uuid.uuid4().hex, out)))
        await asyncio.gather(*tasks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100,200,300,400")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'rate':>6}{'requests':>10}{'at read p50':>13}{'at feed p50':>13}{'at read p99':>13}{'at feed p99':>13}"
          f"{'feed/read p99':>15}{'read-feed p99':>15}")
    with tempfile.TemporaryDirectory(prefix="arrival-stamp-") as tmp:
        for rate in (float(r) for r in args.rates.split(",") if r.strip()):
            server = TruthServer(ServerConfig(50.0, 10.0, 64), Path(tmp) / f"s{rate:g}.json", Path(tmp) / f"s{rate:g}.log")
            try:
                stamps = uvloop.run(fire(server.url, rate, args.duration, args.seed))
            finally:
                truth = server.stop()
            at_read, at_feed, wait = [], [], []
            for rid, (sent, read, fed) in stamps.items():
                ttft = truth.records[rid].ttft if rid in truth.records else None
                if ttft is None:
                    continue
                at_read.append((read - sent - ttft) * 1000.0)
                at_feed.append((fed - sent - ttft) * 1000.0)
                wait.append((read - fed) * 1000.0)
            if not at_read:
                print(f"{rate:>6g}: no request matched the server's records")
                continue
            p99_read, p99_feed = percentile(at_read, 99), percentile(at_feed, 99)
            print(f"{rate:>6g}{len(at_read):>10}{percentile(at_read, 50):>13.2f}{percentile(at_feed, 50):>13.2f}"
                  f"{p99_read:>13.2f}{p99_feed:>13.2f}{p99_feed / p99_read:>14.2f}x{percentile(wait, 99):>15.2f}",
                  flush=True)
    print("(TTFT error in ms against the server's own TTFT; read-feed: how long the reading coroutine "
          "resumed after the feed)")


if __name__ == "__main__":
    main()
