"""The snapshot bus: every subscriber of a live run (the app, the progress printer, the exporter
behind ``--metrics-port``) gets every snapshot, in order, without slowing the others."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from speclab.model.snapshot import Snapshot, coalesce

BACKLOG_LIMIT = 8


def publish(queue: asyncio.Queue[Snapshot], snap: Snapshot, limit: int = BACKLOG_LIMIT) -> None:
    """Queue ``snap`` for one subscriber. A slow consumer with ``limit`` snapshots waiting gets them
    coalesced into one (the newest state, every interval and event of all of them), never dropped."""
    if queue.qsize() >= limit:
        merged: Snapshot | None = None
        while not queue.empty():
            older = queue.get_nowait()
            merged = older if merged is None else coalesce(merged, older)
        snap = snap if merged is None else coalesce(merged, snap)
    queue.put_nowait(snap)


class SnapshotBus:
    """Queues for consumers that read at their own pace, and listeners called at once (the exporter
    keeps only the newest snapshot, so it never queues)."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[Snapshot]] = []
        self._listeners: list[Callable[[Snapshot], None]] = []

    def subscribe(self) -> asyncio.Queue[Snapshot]:
        queue: asyncio.Queue[Snapshot] = asyncio.Queue()
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Snapshot]) -> None:
        self._queues.remove(queue)

    def listen(self, listener: Callable[[Snapshot], None]) -> None:
        self._listeners.append(listener)

    def publish(self, snap: Snapshot) -> None:
        for listener in self._listeners:
            listener(snap)
        for queue in self._queues:
            publish(queue, snap)
