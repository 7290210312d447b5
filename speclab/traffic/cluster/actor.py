"""The traffic worker as a Ray actor: the local worker's engine, on a corrected clock.

The actor builds its engine exactly as a local worker process does (``worker.make_engine``) and
applies the same control messages (``worker.dispatch``); what the engine emits is buffered here
and taken by the coordinator's ``pull`` calls, whose return values travel through Ray's object
store. So whatever a local worker ships to its parent, a cluster worker ships too, unchanged.
Its clock is this host's monotonic clock minus the offset the coordinator measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import traceback
from typing import Any

from ..worker import WorkerConfig, dispatch, make_engine


class TrafficActor:
    """Created through ``ray.remote`` by the coordinator (``cluster.runner``); async, so the
    engine, the pulls, the controls and the clock probes share the actor's event loop."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._outbox: list[tuple[str, Any]] = []
        self._wake = asyncio.Event()
        self._ended = False
        self._engine: Any = None
        self._task: asyncio.Task[None] | None = None
        self._phases: dict[int, asyncio.Future[float]] = {}

    def _clock(self) -> float:
        return time.monotonic() - self._offset

    async def describe(self) -> dict[str, Any]:
        """Where this worker runs: the Ray node, host name and process."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    async def clock(self) -> float:
        """This host's raw monotonic clock, for the coordinator's offset probes."""
        return time.monotonic()

    async def set_offset(self, offset: float) -> None:
        self._offset = offset

    async def start(self, config: WorkerConfig) -> None:
        loop = asyncio.get_running_loop()
        self._engine = make_engine(config, self._put, self._gate, clock=self._clock)
        self._task = loop.create_task(self._run(config.worker))

    async def control(self, message: tuple[Any, ...]) -> None:
        if self._engine is not None:
            dispatch(self._engine, message, self._phase_future)

    async def pull(self, wait_s: float) -> tuple[list[tuple[str, Any]], bool]:
        """What the engine emitted since the last pull (waiting up to ``wait_s`` for something),
        and whether that was the last of it."""
        if not self._outbox and not self._ended:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)
        batch, self._outbox = self._outbox, []
        self._wake.clear()
        return batch, self._ended

    async def relay(self, messages: list[tuple[str, Any]], last: bool = False) -> None:
        """Ship ``messages`` as if this worker's engine had emitted them (``last``: and then end):
        a worker's recorded stream sent again, which is how the merge is checked against the
        local path with identical input."""
        for message in messages:
            self._put(message)
        if last:
            self._ended = True
            self._wake.set()

    def _put(self, message: tuple[str, Any]) -> None:
        self._outbox.append(message)
        self._wake.set()

    def _phase_future(self, phase: int) -> asyncio.Future[float]:
        if phase not in self._phases:
            self._phases[phase] = asyncio.get_running_loop().create_future()
        return self._phases[phase]

    async def _gate(self, phase: int) -> float:
        return await self._phase_future(phase)

    async def _run(self, worker: int) -> None:
        self._put(("ready", worker))
        try:
            self._put(("done", await self._engine.run()))
        except BaseException as error:
            last = traceback.format_exception_only(type(error), error)[-1].strip()
            self._put(("error", f"worker {worker}: {last}"))
        finally:
            self._ended = True
            self._wake.set()
