"""Which intervals a saturated client touched: its own, and those where its requests finished.

A worker reports saturation for the interval it was in; the numbers of every request it sent then
are the client's too, wherever they finished. Kept apart from the aggregator because it is
bookkeeping by interval index alone: it never looks at latencies.
"""

from __future__ import annotations

from speclab.model.snapshot import ClientHealth


class SaturationBook:
    def __init__(self) -> None:
        self.health = ClientHealth()  # the latest report
        self.run_health = ClientHealth()  # the worst of every report
        self.saturated: set[int] = set()  # intervals whose numbers a saturated client affected
        self.saturated_sends: set[int] = set()  # intervals in which the client was saturated
        self._finished_from: dict[int, set[int]] = {}  # send interval -> finish intervals of its requests

    def set_health(self, health: ClientHealth) -> None:
        self.health = health
        run = self.run_health
        self.run_health = ClientHealth(
            schedule_lag_p99_ms=max(run.schedule_lag_p99_ms, health.schedule_lag_p99_ms),
            loop_lag_max_ms=max(run.loop_lag_max_ms, health.loop_lag_max_ms),
            cpu_percent=max(run.cpu_percent, health.cpu_percent),
            in_flight=max(run.in_flight, health.in_flight),
            send_delay_p99_ms=max(run.send_delay_p99_ms, health.send_delay_p99_ms),
            read_lateness_ms=max(run.read_lateness_ms, health.read_lateness_ms),
            saturated=run.saturated or health.saturated,
            reason=run.reason or health.reason,
        )

    def mark(self, interval_index: int) -> None:
        self.saturated_sends.add(interval_index)
        self.saturated.add(interval_index)
        self.saturated.update(self._finished_from.get(interval_index, ()))

    def note_send(self, sent_in: int, finished_in: int) -> None:
        self._finished_from.setdefault(sent_in, set()).add(finished_in)
        if sent_in in self.saturated_sends:
            self.saturated.add(finished_in)

    def forget_sends_before(self, interval_index: int) -> None:
        """Retention: sends this old can no longer be marked."""
        for sent_in in [i for i in self._finished_from if i < interval_index]:
            del self._finished_from[sent_in]
