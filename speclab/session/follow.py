"""A headless driver's loop over a live session's snapshots, raced against Ctrl-C.

`speclab run` and every cell of `speclab sweep` read the same stream the same way: the next
snapshot or the interrupt, whichever comes first, the stream closed on every path. What each does
with a snapshot, and whether an interrupt reads on to the final one, is theirs to say.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from speclab.model.snapshot import Snapshot

from .live import LiveSession

DRAIN_GRACE_S = 1.0  # after the session stopped, how long the snapshot it published may take to arrive

# Handed every snapshot, the final one too; True when the driver has stopped the session itself.
SnapshotStep = Callable[[Snapshot], Awaitable[bool]]


async def follow(session: LiveSession, interrupted: asyncio.Event, step: SnapshotStep, *,
                 on_interrupt: Callable[[], None] | None = None,
                 drain: Callable[[Snapshot], None] | None = None) -> tuple[Snapshot, bool]:
    """Hand each snapshot to ``step`` until the run ends, ``step`` stops it, or the user interrupts;
    return the final snapshot and whether it was interrupted. On an interrupt the session stops;
    with ``drain``, every snapshot up to the final one is handed to it meanwhile, so no interval
    or event is skipped."""
    stream = session.snapshots()
    stop_wait = asyncio.ensure_future(interrupted.wait())
    try:
        while True:
            next_snap = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({next_snap, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if next_snap not in done:
                if on_interrupt is not None:
                    on_interrupt()
                if drain is None:
                    next_snap.cancel()
                    await session.stop("interrupted")
                else:
                    await _drain(session, stream, next_snap, drain)
                return await session.wait(), True
            try:
                snap = next_snap.result()
            except StopAsyncIteration:
                return await session.wait(), False
            stopped = await step(snap)
            if snap.finished:
                return snap, False
            if stopped:
                return await session.wait(), False
    finally:
        stop_wait.cancel()
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]


async def _drain(session: LiveSession, stream: AsyncIterator[Snapshot], next_snap: asyncio.Future[Any],
                 drain: Callable[[Snapshot], None]) -> None:
    """Stop the session while reading on to its final snapshot."""
    stopper: asyncio.Future[Any] = asyncio.ensure_future(session.stop("interrupted"))
    while True:
        done, _ = await asyncio.wait({next_snap, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if next_snap not in done:  # stopped: what it published is queued already
            done, _ = await asyncio.wait({next_snap}, timeout=DRAIN_GRACE_S)
        if next_snap not in done:
            next_snap.cancel()
            break
        try:
            snap = next_snap.result()
        except StopAsyncIteration:
            break
        drain(snap)
        if snap.finished:
            break
        next_snap = asyncio.ensure_future(anext(stream))
    await stopper
