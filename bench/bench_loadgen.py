"""How fast can speclab's load generator go before its own numbers stop being true?

A minimal streaming server runs in its own process on loopback (64-token streams, 50 ms to the
first token, then 10 ms per token) and records, per request id, the moment it wrote the first
token chunk. At each open-loop rate, speclab's TrafficRunner and a plain asyncio + aiohttp client
(also in its own process) fire the same constant-rate schedule; each client's measured first-token
time is matched per request with the server's record. The TTFT error (client receipt − server
send) is what the client adds to every latency it reports. A rate is *sustained* when every request
completed, TTFT error p99 ≤ 5 ms and schedule lag p99 ≤ 5 ms.

    .venv/bin/python bench/bench_loadgen.py [--rates 50,100,200,300,400] [--duration 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import time
import urllib.request
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOKENS = 64
TTFT_S = 0.050
ITL_S = 0.010
LIMIT_MS = 5.0


# ---- the server (own process, uvloop, raw HTTP/1.1 with chunked SSE) -------------------------

def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunks() -> list[bytes]:
    out = []
    for i in range(TOKENS):
        obj = {"choices": [{"index": 0, "text": "tok ", "token_ids": [1000 + i],
                            "finish_reason": "length" if i == TOKENS - 1 else None}],
               "usage": {"prompt_tokens": 8, "completion_tokens": i + 1}}
        out.append(_frame(b"data: " + json.dumps(obj).encode() + b"\n\n"))
    return out


def serve(port: int, ready: Any) -> None:
    import uvloop

    chunks = _chunks()
    tail = _frame(b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":64}}\n\n') + \
        _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    first_sent: dict[str, float] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                raw = await reader.readuntil(b"\r\n\r\n")
                lines = raw.split(b"\r\n")
                path = lines[0].split(b" ")[1]
                headers = {}
                for line in lines[1:]:
                    key, _, value = line.partition(b":")
                    headers[key.strip().lower()] = value.strip()
                length = int(headers.get(b"content-length", b"0"))
                if length:
                    await reader.readexactly(length)
                if path == b"/records":
                    body = json.dumps(first_sent).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    continue
                rid = headers.get(b"x-request-id", b"").decode()
                writer.write(head)
                await asyncio.sleep(TTFT_S)
                first_sent[rid] = time.monotonic()
                writer.write(chunks[0])
                for chunk in chunks[1:]:
                    await asyncio.sleep(ITL_S)
                    writer.write(chunk)
                writer.write(tail)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        ready.set()
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def server_records(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/records", timeout=30) as resp:
        data: dict[str, float] = json.loads(resp.read())
    return data


# ---- the plain client (own process, stock asyncio loop, the usual aiohttp streaming loop) ----

def plain_client(url: str, rate: float, duration: float, prefix: str, conn: Connection) -> None:
    import aiohttp

    async def main() -> dict[str, Any]:
        results: list[tuple[str, float, float, float | None, bool]] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one(i: int, intended: float) -> None:
                rid = f"{prefix}-{i}"
                body = {"model": "bench", "prompt": "hello", "max_tokens": TOKENS, "stream": True,
                        "stream_options": {"include_usage": True}, "return_token_ids": True}
                sent = time.monotonic()
                first = None
                done = False
                async with session.post(url, json=body, headers={"X-Request-Id": rid}) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data: "):
                            continue
                        payload = line[6:].strip()
                        if payload == b"[DONE]":
                            done = True  # read on to the end so the connection is reused
                            continue
                        obj = json.loads(payload)
                        if first is None and obj["choices"] and obj["choices"][0].get("token_ids"):
                            first = time.monotonic()
                results.append((rid, intended, sent, first, done))

            cpu0 = time.process_time()
            start = time.monotonic() + 0.2
            tasks = []
            n = int(rate * duration)
            for i in range(n):
                intended = start + i / rate
                delay = intended - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(one(i, intended)))
            await asyncio.gather(*tasks, return_exceptions=True)
            return {"results": results, "cpu_s": time.process_time() - cpu0, "planned": n}

    conn.send(asyncio.run(main()))
    conn.close()


# ---- speclab's load generator ----------------------------------------------------------------

async def speclab_client(url: str, rate: float, duration: float, prefix: str, workers: int) -> dict[str, Any]:
    from speclab.model.scenario import Scenario
    from speclab.traffic import Target, TrafficRunner, build_plan

    scenario = Scenario.model_validate({
        "name": prefix, "seed": 0, "duration_s": duration, "endpoint": "completions",
        "arrival": {"process": "constant", "rate": rate},
        "classes": {"bench": {"temperature": 0, "max_tokens": TOKENS, "prompts": ["hello"]}},
    })
    plan = build_plan(scenario)
    run_start = time.monotonic()
    records: list[Any] = []
    runner = TrafficRunner(plan, {"v": Target("v", url, "bench")}, workers=workers, run_start=run_start,
                           on_records=records.extend, on_health=lambda h: None)
    await runner.start()
    summary = await runner.finished
    results = [
        (r.request_id, r.intended + run_start, (r.sent or 0) + run_start,
         None if r.first_token is None else r.first_token + run_start, r.ok)
        for r in records
    ]
    return {"results": results, "cpu_s": summary.cpu_s, "planned": len(plan.offsets())}


# ---- measuring -------------------------------------------------------------------------------

@dataclass
class Row:
    client: str
    rate: float
    planned: int
    completed: int
    lag_p99_ms: float
    err_p50_ms: float
    err_p99_ms: float
    cpu_per_1000: float
    load: float  # the host's 1-minute load average before the run (the host is shared)

    @property
    def sustained(self) -> bool:
        return self.completed == self.planned and self.err_p99_ms <= LIMIT_MS and self.lag_p99_ms <= LIMIT_MS


def pct(values: list[float], q: float) -> float:
    from speclab.traffic.health import percentile

    return percentile(values, q) if values else float("nan")


def evaluate(client: str, rate: float, out: dict[str, Any], served: dict[str, float], load: float) -> Row:
    lags, errors, completed = [], [], 0
    for rid, intended, sent, first, ok in out["results"]:
        lags.append((sent - intended) * 1000)
        if ok and first is not None and rid in served:
            completed += 1
            errors.append((first - served[rid]) * 1000)
    return Row(client, rate, out["planned"], completed, pct(lags, 99), pct(errors, 50), pct(errors, 99),
               out["cpu_s"] / max(completed, 1) * 1000, load)


def run_plain(url: str, rate: float, duration: float, prefix: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=plain_client, args=(url, rate, duration, prefix, child))
    proc.start()
    child.close()
    out: dict[str, Any] = parent.recv()
    proc.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="50,100,200,300,400")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    server = ctx.Process(target=serve, args=(port, ready), daemon=True)
    server.start()
    ready.wait(30)
    url = f"http://127.0.0.1:{port}"
    rows: list[Row] = []
    began = time.monotonic()
    try:
        for rate in rates:
            tag = f"r{int(rate)}"
            load = os.getloadavg()[0]
            spec = asyncio.run(speclab_client(url, rate, args.duration, f"speclab-{tag}", args.workers))
            rows.append(evaluate(f"speclab ({args.workers} worker)", rate, spec, server_records(port), load))
            load = os.getloadavg()[0]
            plain = run_plain(url + "/v1/completions", rate, args.duration, f"plain-{tag}")
            rows.append(evaluate("plain asyncio+aiohttp", rate, plain, server_records(port), load))
            print(f"  rate {rate:g}/s done", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.join()

    print(f"\nloopback, {TOKENS}-token streams, {TTFT_S * 1000:g} ms TTFT, {ITL_S * 1000:g} ms/token, "
          f"{args.duration:g} s per rate; sustained = all completed, TTFT error p99 and schedule lag p99 "
          f"<= {LIMIT_MS:g} ms")
    header = f"{'client':<24}{'rate/s':>8}{'done':>11}{'lag p99 ms':>12}{'err p50 ms':>12}{'err p99 ms':>12}" \
             f"{'CPU s/1000':>12}{'host load':>11}  sustained"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.client:<24}{row.rate:>8g}{f'{row.completed}/{row.planned}':>11}{row.lag_p99_ms:>12.2f}"
              f"{row.err_p50_ms:>12.2f}{row.err_p99_ms:>12.2f}{row.cpu_per_1000:>12.2f}{row.load:>11.2f}  "
              f"{'yes' if row.sustained else 'no'}")
    for client in dict.fromkeys(r.client for r in rows):
        mine = sorted((r for r in rows if r.client == client), key=lambda r: r.rate)
        best = None
        for row in mine:  # the highest rate up to which every rate tried was sustained
            if not row.sustained:
                break
            best = row.rate
        print(f"highest sustained rate, {client}: {best:g} req/s" if best is not None else
              f"highest sustained rate, {client}: none of the rates tried")
    print(f"(bench took {time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
