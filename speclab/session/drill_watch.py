"""HAProxy's own view of a rollback: its counters polled over a second runtime-API connection.

The controller's connection carries the rollback itself; polling on it would queue behind the
change. This one reads ``show stat`` just before the command and then every ``period`` seconds
until the speculative servers have no request in progress after the routing was confirmed (or
``timeout`` passes), and fills a :class:`GatewayWatch`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from speclab.gates.drill import GatewayWatch
from speclab.gateway.runtime import RuntimeAPI, StatRow
from speclab.model.errors import SpeclabError


def speculative_counts(rows: list[StatRow], speculative: tuple[str, ...]) -> tuple[int, int]:
    """(requests in progress, requests given) summed over every server row of a speculative variant
    (its own backend and its place in the canary pool)."""
    mine = [r for r in rows if r.is_server and r.name in speculative]
    return sum(r.current for r in mine), sum(r.total for r in mine)


class FlipWatcher:
    def __init__(self, socket: str | Path, speculative: tuple[str, ...], clock: Callable[[], float], *,
                 period: float = 0.02, timeout: float = 120.0) -> None:
        self.api = RuntimeAPI(socket, timeout=5.0)
        self.speculative = speculative
        self.clock = clock
        self.period = period
        self.timeout = timeout
        self.watch = GatewayWatch(poll_period_s=period)
        self.confirmed_s: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def before_flip(self, wait_for_in_flight_s: float = 0.0) -> None:
        """Connect and take the reading the command is compared with; with ``wait_for_in_flight_s``,
        first wait (that long at most) until HAProxy has a speculative request in progress, so the
        flip is made with a response to drain."""
        try:
            await self.api.connect()
            deadline = self.clock() + wait_for_in_flight_s
            current, total = speculative_counts(await self.api.stats(), self.speculative)
            while current == 0 and self.clock() < deadline:
                await asyncio.sleep(self.period / 2)
                current, total = speculative_counts(await self.api.stats(), self.speculative)
        except SpeclabError as error:
            self.watch.error = str(error)
            return
        self.watch.in_flight_at_flip, self.watch.total_at_flip = current, total

    def start(self, command_s: float) -> None:
        if self.watch.total_at_flip is not None:
            self._task = asyncio.create_task(self._poll(command_s), name="speclab-drill-watch")

    async def _poll(self, command_s: float) -> None:
        watch = self.watch
        last_total = watch.total_at_flip or 0
        deadline = command_s + self.timeout
        try:
            while self.clock() < deadline:
                rows = await self.api.stats()
                now = self.clock()
                current, total = speculative_counts(rows, self.speculative)
                watch.polls += 1
                if total > last_total:
                    watch.routed_after_command += total - last_total
                    watch.last_routed_s = now
                    last_total = total
                if current == 0 and watch.drained_s is None:
                    watch.drained_s = now
                elif current > 0:
                    watch.drained_s = None  # a request routed before the confirmation is still running
                if watch.drained_s is not None and self.confirmed_s is not None:
                    return
                await asyncio.sleep(self.period)
        except SpeclabError as error:
            watch.error = str(error)

    async def finish(self, wait_s: float) -> GatewayWatch:
        """Let the poll see the drain (up to ``wait_s``), then close the connection."""
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._task), wait_s)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
                if self.watch.drained_s is None and self.watch.error is None:
                    self.watch.error = f"speculative servers still had requests in progress {wait_s:g} s later"
        await self.api.close()
        return self.watch
