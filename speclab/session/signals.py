"""Ctrl-C and SIGTERM as an event a driver waits on: a terminal's Ctrl-C reaches the whole process
group, the traffic workers ignore it, and the process that owns them drains them and writes what
was measured. Every headless driver (run, accept, sweep, drill) installs it the same way."""

from __future__ import annotations

import asyncio
import contextlib
import signal


def catch_interrupts() -> asyncio.Event:
    """An event SIGINT and SIGTERM set from now on (where the loop supports signal handlers)."""
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
        loop.add_signal_handler(signal.SIGTERM, interrupted.set)
    return interrupted


def release_interrupts() -> None:
    """Give SIGINT and SIGTERM back their default handling."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)


async def hold(seconds: float) -> bool:
    """Wait ``seconds`` (keeping a finished run's metrics up for a last scrape), ended early and
    quietly by Ctrl-C or SIGTERM: everything is written by then. True when cut short."""
    interrupted = catch_interrupts()
    try:
        await asyncio.wait_for(interrupted.wait(), seconds)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        release_interrupts()
