"""aiohttp's request-body writer started eagerly, as aiohttp starts it on Python 3.12 and later.

aiohttp sends a request's line and headers from ``ClientRequest.send`` and its body from a task of
its own (``write_bytes``). From Python 3.12 that task is created with ``eager_start=True``, so a
small JSON body reaches the socket before ``send`` returns. On Python 3.11 the task waits one
loop turn, behind every callback already queued: in a worker reading a step's burst of chunks
from a few hundred streams that turn lasts milliseconds, and each of them is added to the request's
measured TTFT before the server has seen a byte.

``install(loop)`` sets a task factory that runs that one coroutine eagerly up to its first real
suspension (it finishes there unless the socket's buffer is full) and leaves every other task to
the loop's own factory. On 3.12+ it does nothing: aiohttp already does it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Generator
from typing import Any

WRITER_QUALNAME = "ClientRequest.write_bytes"


class _Resume:
    """Continue a coroutine that already ran to its first suspension (``pending`` is what it yielded)."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coro, self._pending = coro, pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self._coro, self._pending
        while True:
            try:
                value = yield pending
            except BaseException as exc:  # cancellation and errors go into the coroutine, as a Task's would
                try:
                    pending = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(value)
                except StopIteration as done:
                    return done.value


async def _continue(coro: Coroutine[Any, Any, Any], pending: Any) -> Any:
    return await _Resume(coro, pending)


def _factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any) -> asyncio.Future[Any]:
    if getattr(coro, "__qualname__", "") != WRITER_QUALNAME:
        return asyncio.Task(coro, loop=loop, **kwargs)
    try:
        pending = coro.send(None)
    except StopIteration as done:
        future: asyncio.Future[Any] = loop.create_future()
        future.set_result(done.value)
        return future  # done: aiohttp keeps no writer task
    except Exception as exc:  # KeyboardInterrupt and SystemExit propagate, as from an eager task
        future = loop.create_future()
        future.set_exception(exc)
        return future
    return asyncio.Task(_continue(coro, pending), loop=loop, **kwargs)


def install(loop: asyncio.AbstractEventLoop) -> bool:
    """Start aiohttp's body writer eagerly on ``loop``; False where Python already does (3.12+)
    or the loop has a task factory of its own."""
    if sys.version_info >= (3, 12) or loop.get_task_factory() is not None:
        return False
    loop.set_task_factory(_factory)  # type: ignore[arg-type]
    return True
