"""The load-generator worker process: its own interpreter and event loop (uvloop where installed).

Isolation is the point: the parent renders, aggregates and records; a worker only fires requests.
Control arrives on one pipe (read by the event loop), records and health leave on another in
``shipping``'s wire form, written by a sender thread so a slow reader never blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from . import eager_write
from .client import Target
from .engine import TrafficEngine
from .schedule import Plan
from .shipping import DONE, ERROR, READY, Message, to_wire


@dataclass
class WorkerConfig:
    plan: Plan
    targets: list[Target]
    worker: int
    workers: int
    sequential: bool
    run_start: float
    batch_size: int = 64
    connector_limit: int = 0
    health_interval_s: float = 1.0  # S under a simulator's time scale S


class _Sender:
    """Ships messages to the parent from a thread; ``put`` never blocks the event loop."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="speclab-sender", daemon=True)
        self._thread.start()

    def put(self, message: Message) -> None:
        self._queue.put(to_wire(message))

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            try:
                self._conn.send(message)
            except (BrokenPipeError, OSError):
                return

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)
        with contextlib.suppress(OSError):
            self._conn.close()


def make_engine(
    config: WorkerConfig, emit: Callable[[tuple[str, Any]], None],
    phase_gate: Callable[[int], Awaitable[float]], clock: Callable[[], float] = time.monotonic,
) -> TrafficEngine:
    """The worker's engine, built one way for a local process and a cluster actor alike: what it
    emits is what either ships to the parent."""
    return TrafficEngine(
        config.plan, config.targets, run_start=config.run_start, emit=emit,
        worker=config.worker, workers=config.workers, sequential=config.sequential,
        batch_size=config.batch_size, connector_limit=config.connector_limit, phase_gate=phase_gate, clock=clock,
        health_interval_s=config.health_interval_s,
    )


def worker_main(config: WorkerConfig, ctrl: Connection, data: Connection) -> None:
    """Process entry point (multiprocessing spawn). SIGINT is the parent's to handle: it arrived
    blocked (``runner.start_without_sigint``) and is ignored from here on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    settle_heap()
    sender = _Sender(data)
    try:
        summary = _run(_amain(config, ctrl, sender))
        sender.put((DONE, summary))
    except BaseException as error:
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        sender.put((ERROR, f"worker {config.worker}: {last}"))
    finally:
        sender.close()


def settle_heap() -> None:
    """Move everything imported and unpickled so far out of the collector's reach (``gc.freeze``).

    A full collection walks every tracked object; in a worker that is tens of thousands of objects of
    modules (aiohttp, pydantic, speclab) that live as long as the process, and the walk stops the
    event loop for tens of milliseconds on a busy host: every chunk that arrives meanwhile is read
    that much late, which showed as the tail of the TTFT error. Frozen, a collection walks only what
    traffic allocated since (records in flight, chunks being parsed).
    """
    gc.collect()
    gc.freeze()


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _amain(config: WorkerConfig, ctrl: Connection, sender: _Sender) -> Any:
    loop = asyncio.get_running_loop()
    eager_write.install(loop)
    phases: dict[int, asyncio.Future[float]] = {}

    def phase_future(phase: int) -> asyncio.Future[float]:
        if phase not in phases:
            phases[phase] = loop.create_future()
        return phases[phase]

    async def gate(phase: int) -> float:
        return await phase_future(phase)

    engine = make_engine(config, sender.put, gate)

    def on_control() -> None:
        try:
            while ctrl.poll():
                dispatch(engine, ctrl.recv(), phase_future)
        except (EOFError, OSError):
            loop.remove_reader(ctrl.fileno())
            engine.stop(0.0)  # the parent is gone

    loop.add_reader(ctrl.fileno(), on_control)
    sender.put((READY, config.worker))
    try:
        return await engine.run()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(ctrl.fileno())


def dispatch(engine: TrafficEngine, message: tuple[Any, ...], phase_future: Any) -> None:
    kind = message[0]
    if kind == "begin":
        engine.begin(message[1])
    elif kind == "pause":
        engine.pause(message[1])
    elif kind == "resume":
        engine.resume(message[1])
    elif kind == "set_rate":
        engine.set_rate(message[1], message[2])
    elif kind == "set_concurrency":
        engine.set_concurrency(message[1], message[2])
    elif kind == "set_target":
        engine.set_target(message[1])
    elif kind == "hold":
        engine.hold(message[1])
    elif kind == "stop":
        engine.stop(message[1], message[2])
        for phase in range(len(engine.targets)):
            future = phase_future(phase)
            if not future.done():
                future.set_result(message[2])
    elif kind == "phase":
        future = phase_future(message[1])
        if not future.done():
            future.set_result(message[2])
