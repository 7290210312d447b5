"""A tiny SSE reader for the tests: the raw ``data:`` payloads of one streamed response."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def post_stream(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[str]:
    """POST with stream=true; return each event's data payload (``[DONE]`` included) in order."""
    events: list[str] = []
    async with aiohttp.ClientSession() as s, s.post(url, json={**body, "stream": True}, headers=headers) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = (await r.read()).decode()
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        events.append(block[len("data: "):])
    return events


def chunks(events: list[str]) -> list[dict[str, Any]]:
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def post_json(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.text()
