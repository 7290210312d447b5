"""`speclab drill --metrics-port`: speclab's own series during a drill, per backend that answered.

The drill's traffic goes to the gateway, so each request is counted under the server that
answered it (the ``variant`` label; ``unrouted`` when none did), as the drill report's variant
tables count it. The drill moves tenants between servers and relaunches none, so every backend
stays in its first config epoch. A snapshot is published once a second and a final one at the end,
through the same collector as ``run`` and ``lab``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.exporter_http import MetricsEndpoint
from speclab.model.names import INTERVAL_S
from speclab.model.records import RequestRecord
from speclab.servers.manager import RunningServer

UNROUTED = "unrouted"  # a request no backend answered (the gateway itself refused or was gone)


def by_backend(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records as if each had been sent to the server that answered it."""
    return [dataclasses.replace(r, variant=r.backend or UNROUTED) for r in records]


class DrillMetrics:
    """Feeds ``endpoint``'s collector from the drill's records; ``close`` stops serving."""

    def __init__(self, endpoint: MetricsEndpoint, variants: Iterable[str], classes: Iterable[str], *,
                 simulated: bool, warmup_s: float) -> None:
        self.endpoint = endpoint
        classes = list(classes)
        endpoint.collector.expect_classes(classes)
        self.aggregator = Aggregator(list(variants), classes, interval_s=INTERVAL_S, simulated=simulated,
                                     warmup_s=warmup_s)
        self._finished = False

    @property
    def url(self) -> str:
        return self.endpoint.url

    def launch(self, servers: Mapping[str, RunningServer]) -> None:
        for name, server in servers.items():
            self.aggregator.launch(name, dict(server.settings), baseline=server.baseline)

    def add(self, records: Iterable[RequestRecord]) -> None:
        if not self._finished:
            self.aggregator.add_records(by_backend(records))

    async def pump(self, now: Callable[[], float]) -> None:
        """Publish a snapshot every interval until cancelled (or finished)."""
        while not self._finished:
            await asyncio.sleep(INTERVAL_S)
            if self._finished:
                return
            t = now()
            self.aggregator.tick(t)
            self.endpoint.collector.update(self.aggregator.snapshot(t))

    def finish(self, end_s: float) -> None:
        """The final snapshot: every record in, ``speclab_run_finished`` 1. Idempotent."""
        if self._finished:
            return
        self._finished = True
        self.aggregator.finish(end_s)
        self.endpoint.collector.update(self.aggregator.snapshot(end_s, finished=True))

    def close(self) -> None:
        self.endpoint.close()
