"""aiohttp's body writer started eagerly on Python 3.11, over a real socket."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from speclab.traffic import eager_write

from .fake_server import FakeServer

AIOHTTP_EAGER = sys.version_info >= (3, 12)  # aiohttp starts its writer eagerly itself there


@pytest.fixture
async def installed() -> AsyncIterator[asyncio.AbstractEventLoop]:
    loop = asyncio.get_running_loop()
    loop.set_task_factory(eager_write._factory)  # what install sets on Python 3.11
    try:
        yield loop
    finally:
        loop.set_task_factory(None)


async def _order_of_write_and_next_callback(base_url: str) -> list[str]:
    """On a pooled connection: is the body on the socket before a callback queued just ahead of the post runs?"""
    events: list[str] = []
    trace = aiohttp.TraceConfig()

    async def on_chunk(session: object, ctx: object, params: object) -> None:
        events.append("written")

    trace.on_request_chunk_sent.append(on_chunk)
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        body = {"model": "ok:n=1:per=1:ttft=0:itl=0", "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(base_url + "/v1/chat/completions", json=body) as r:
            await r.read()  # the connection is now pooled: the next post does not await a connect
        events.clear()
        asyncio.get_running_loop().call_soon(events.append, "next callback")
        async with session.post(base_url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
            await r.read()
    return events


async def test_without_it_the_body_waits_a_loop_turn_on_python_3_11(fake_server: FakeServer) -> None:
    events = await _order_of_write_and_next_callback(fake_server.base_url)
    assert events[:2] == (["written", "next callback"] if AIOHTTP_EAGER else ["next callback", "written"])


async def test_installed_the_body_is_written_before_the_loop_turns(fake_server: FakeServer) -> None:
    loop = asyncio.get_running_loop()
    assert eager_write.install(loop) is not AIOHTTP_EAGER  # nothing to do where aiohttp does it
    try:
        events = await _order_of_write_and_next_callback(fake_server.base_url)
    finally:
        loop.set_task_factory(None)
    assert events[:2] == ["written", "next callback"]


class ClientRequest:  # the qualname the factory starts eagerly
    def __init__(self, gate: asyncio.Future[str] | None) -> None:
        self.gate, self.steps = gate, ["created"]

    async def write_bytes(self) -> str:
        self.steps.append("started")
        if self.gate is None:
            raise OSError("socket closed")
        value = await self.gate
        self.steps.append("resumed")
        return value


async def test_a_writer_that_suspends_resumes_as_a_task(installed: asyncio.AbstractEventLoop) -> None:
    gate: asyncio.Future[str] = installed.create_future()
    request = ClientRequest(gate)
    task = installed.create_task(request.write_bytes())
    assert request.steps == ["created", "started"]  # ran up to its await before create_task returned
    assert not task.done()
    gate.set_result("sent")
    assert await task == "sent" and request.steps[-1] == "resumed"


async def test_a_suspended_writer_is_cancelled_inside(installed: asyncio.AbstractEventLoop) -> None:
    request = ClientRequest(installed.create_future())
    task = installed.create_task(request.write_bytes())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert request.steps == ["created", "started"]


async def test_a_writer_that_fails_at_once_carries_its_error(installed: asyncio.AbstractEventLoop) -> None:
    future = installed.create_task(ClientRequest(None).write_bytes())
    assert future.done()
    with pytest.raises(OSError, match="socket closed"):
        future.result()


async def test_other_tasks_are_left_to_the_loop(installed: asyncio.AbstractEventLoop) -> None:
    steps: list[str] = []

    async def other() -> None:
        steps.append("ran")

    task = installed.create_task(other())
    assert steps == [] and isinstance(task, asyncio.Task)
    await task
    assert steps == ["ran"]


async def test_a_loop_with_its_own_factory_is_left_alone() -> None:
    loop = asyncio.get_running_loop()
    own = lambda loop, coro, **kw: asyncio.Task(coro, loop=loop, **kw)  # noqa: E731
    loop.set_task_factory(own)
    try:
        assert not eager_write.install(loop)
        assert loop.get_task_factory() is own
    finally:
        loop.set_task_factory(None)
