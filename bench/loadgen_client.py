"""The plain client bench_loadgen puts beside speclab: the usual aiohttp streaming loop, nothing more.

It reads a plan (absolute send offsets, request ids and the exact bodies speclab sends), then in
one event loop sleeps until each request's intended time and starts it. Per request it stamps the
send (just before ``session.post``, as speclab does), the first read that carries a token and the
read that carries ``[DONE]``; every event is JSON-decoded, as a client that counts tokens must.
``--loop uvloop`` is the strongest Python client we know of on this host; ``--loop asyncio`` is
the stock loop for reference. Times are written relative to the schedule's origin.

    python bench/loadgen_client.py --plan PLAN.json --url http://127.0.0.1:PORT --out OUT.json [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

START_DELAY_S = 0.5  # between the session being up and the schedule's first request


async def one(session: aiohttp.ClientSession, url: str, rid: str, body: bytes, intended: float,
              origin: float, out: list[list[Any]]) -> None:
    headers = {"Content-Type": "application/json", "X-Request-Id": rid}
    first = done = None
    tokens = 0
    error = None
    sent = time.monotonic()
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            if resp.status != 200:
                error = f"http {resp.status}"
                await resp.read()
            else:
                tail = b""
                async for data in resp.content.iter_any():
                    now = time.monotonic()
                    events = (tail + data).split(b"\n\n")
                    tail = events.pop()
                    for event in events:
                        if not event.startswith(b"data: "):
                            continue
                        payload = event[6:]
                        if payload == b"[DONE]":
                            done = now
                            continue
                        obj = json.loads(payload)
                        choices = obj.get("choices")
                        if choices:
                            choice = choices[0]
                            delta = choice.get("delta")
                            text = delta.get("content") if delta is not None else choice.get("text")
                            if text or choice.get("token_ids"):
                                tokens += 1
                                if first is None:
                                    first = now
                if done is None:
                    error = "closed before [DONE]"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    out.append([rid, intended - origin, sent - origin, None if first is None else first - origin,
                None if done is None else done - origin, tokens, error])


async def run(plan: dict[str, Any], url: str) -> dict[str, Any]:
    results: list[list[Any]] = []
    target = url.rstrip("/") + plan["path"]
    requests = [(float(offset), str(rid), str(body).encode()) for offset, rid, body in plan["requests"]]
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=600, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks: set[asyncio.Task[None]] = set()
        origin = time.monotonic() + START_DELAY_S
        for offset, rid, body in requests:
            intended = origin + offset
            delay = intended - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(one(session, target, rid, body, intended, origin, results))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
    return {"fields": ["request_id", "intended", "sent", "first_token", "done", "tokens", "error"],
            "records": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()
    plan = json.loads(args.plan.read_text())
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(run(plan, args.url))
    else:
        result = asyncio.run(run(plan, args.url))
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
