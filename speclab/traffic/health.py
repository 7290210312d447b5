"""Is the load generator keeping up? Numbers from a saturated client are not the server's.

A request's TTFT error is what the client adds on its way out (from the ``sent`` stamp to the
request's write to the socket) and on its way back (how late its event loop reads the first chunk).
Each worker measures the first per request (``client.write_tracer``) and estimates the second with a
2 ms ticker (about 500 samples a second of how late the loop wakes, weighted by the time each stall
lasted, see ``read_lateness``); it also watches its schedule lag (sent − intended: is the planned
load being offered?) and its CPU share. An interval in which any crosses its limit is reported as
saturated, with the reason, so the aggregator can flag it in progress lines and reports. The limits
are calibrated against a server that timestamps its own side of every request
(``bench/calibrate_health.py``, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

# Fitted on a 2-core host against the ground-truth server (bench/calibrate_health.py, chunks stamped
# at the feed; bench/fit_health.py) on five runs: 50-500 req/s beside a core-burning process, 7-15
# req/s beside the bundled lab's simulators, 150-300 req/s with no neighbour. A bad interval is one
# whose true TTFT error p99 was above 5 ms or whose load reached the server more than 8 ms late
# (p99). On the five the limits below flagged 119 of 124 bad intervals and 3 of 182 accurate ones;
# on three runs they were not fitted to, 56 of 59 (95%) and 5 of 118 (4%), where the limits they
# replace (send delay 4.5 ms, CPU 80%) gave 57 of 59 and 11 of 118 (docs/benchmarks.md).
SCHEDULE_LAG_LIMIT_MS = 8.0
SEND_DELAY_LIMIT_MS = 5.0
READ_LATENESS_LIMIT_MS = 5.0
READ_LATENESS_QUANTILE = 0.995
CPU_LIMIT_PERCENT = 85.0
TICK_S = 0.002


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """One worker's view of itself over one interval of the run clock (1 s, or S s of wall time under a
    simulator's time scale S); ``t`` is wall run-clock seconds."""

    worker: int
    interval: int
    t: float  # when the report was made (run clock)
    sent: int
    finished: int
    in_flight: int
    schedule_lag_p99_ms: float
    schedule_lag_max_ms: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    cpu_percent: float
    saturated: bool
    reason: str = ""
    node: str = ""  # where the worker ran (a cluster node; "" for a local worker)
    clock_offset_ms: float = 0.0  # its clock minus the coordinator's (cluster workers)
    clock_bound_ms: float = 0.0  # how far that offset may be wrong (0: the same clock)
    read_lateness_ms: float = 0.0  # read_lateness p99.5: how late the loop read what arrived
    send_delay_p99_ms: float = 0.0  # sent stamp to the body's write, p99 over the requests written


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of a small list (0 for an empty one)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[rank]


def read_lateness(lags: list[float], tick_s: float, q: float = READ_LATENESS_QUANTILE) -> float:
    """The q-quantile of how long something arriving at a random moment waits for the event loop.

    A ticker that wakes ``L`` late was blocked for ``L``: a chunk that arrived during that time waited
    between 0 and ``L`` for the loop. So a stall of 50 ms is one tick sample but 50 ms of the
    interval's time, and a p99 over the ticks under-weights it where the requests' error p99 does not.
    Over the interval's time ``T = Σ(tick_s + L)`` the share of moments meeting a lateness above ``y``
    is ``Σ max(0, L − y) / T``; this returns the smallest ``y`` that keeps that share within ``1 − q``.
    A request meets the loop twice on the way to its first token (its write and that read), so the
    error p99 over requests goes with the lateness p99.5 over moments (the default ``q``).
    """
    if not lags:
        return 0.0
    budget = (1.0 - q) * (tick_s * len(lags) + sum(lags))
    ordered = sorted(lags, reverse=True)
    acc = 0.0
    for k, lag in enumerate(ordered, 1):
        acc += lag
        following = ordered[k] if k < len(ordered) else 0.0
        if acc - k * following >= budget:
            return max(following, (acc - budget) / k)
    return 0.0


def judge(schedule_p99_ms: float, read_lateness_ms: float, cpu_percent: float,
          send_delay_p99_ms: float = 0.0) -> tuple[bool, str]:
    reasons = []
    if schedule_p99_ms > SCHEDULE_LAG_LIMIT_MS:
        reasons.append(f"schedule lag p99 {schedule_p99_ms:.1f} ms > {SCHEDULE_LAG_LIMIT_MS:g} ms")
    if send_delay_p99_ms > SEND_DELAY_LIMIT_MS:
        reasons.append(f"send delay p99 {send_delay_p99_ms:.1f} ms > {SEND_DELAY_LIMIT_MS:g} ms")
    if read_lateness_ms > READ_LATENESS_LIMIT_MS:
        reasons.append(f"read lateness p99.5 {read_lateness_ms:.2f} ms > {READ_LATENESS_LIMIT_MS:g} ms")
    if cpu_percent >= CPU_LIMIT_PERCENT:
        reasons.append(f"client CPU {cpu_percent:.0f}% of a core")
    return bool(reasons), "; ".join(reasons)


class HealthMonitor:
    """Runs the ticker; calls ``emit`` with a WorkerHealth at each interval boundary and ``on_tick``
    every tick (the engine flushes record batches there)."""

    def __init__(
        self,
        worker: int,
        run_start: float,
        counts: Callable[[], tuple[int, int, int]],
        emit: Callable[[WorkerHealth], None],
        *,
        on_tick: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
        interval_s: float = 1.0,
    ) -> None:
        """``interval_s``: the wall length of one interval (S seconds under a simulator's time scale S,
        so interval ``n`` is the run's modelled second ``n``); the limits are judged in wall time."""
        self.worker = worker
        self.interval_s = interval_s
        self.run_start = run_start
        self._counts = counts
        self._emit = emit
        self._on_tick = on_tick
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._schedule_lags: list[float] = []
        self._loop_lags: list[float] = []
        self._send_delays: list[float] = []
        self._interval: int | None = None
        self._cpu_mark = (0.0, 0.0)
        self._base = (0, 0)

    def note_schedule_lag(self, lag_s: float) -> None:
        self._schedule_lags.append(lag_s)

    def note_send_delay(self, delay_s: float) -> None:
        self._send_delays.append(delay_s)

    def note_loop_lag(self, lag_s: float) -> None:
        self._loop_lags.append(lag_s)

    def start(self) -> None:
        now = self._clock() - self.run_start
        self._interval = int(now // self.interval_s)
        self._cpu_mark = (self._clock(), self._cpu_clock())
        sent, finished, _ = self._counts()
        self._base = (sent, finished)

    def check(self, now: float) -> None:
        """Close the interval if ``now`` (run clock) has moved past it.

        When the event loop was blocked across whole intervals, no tick fell in them; each is
        reported as saturated too, so the aggregator flags every interval the client lost.
        """
        if self._interval is None:
            self.start()
            return
        current = int(now // self.interval_s)
        if current > self._interval:
            health = self.report(now)
            if current > self._interval + 1:
                reason = f"event loop blocked for {health.loop_lag_max_ms:.0f} ms, no tick in the interval"
                for skipped in range(self._interval + 1, current):
                    self._emit(replace(health, interval=skipped, sent=0, finished=0, saturated=True, reason=reason))
            self._interval = current

    def report(self, now: float) -> WorkerHealth:
        wall, cpu = self._clock(), self._cpu_clock()
        dwall = wall - self._cpu_mark[0]
        cpu_percent = 100.0 * (cpu - self._cpu_mark[1]) / dwall if dwall > 0 else 0.0
        self._cpu_mark = (wall, cpu)
        sched, loop, send = self._schedule_lags, self._loop_lags, self._send_delays
        self._schedule_lags, self._loop_lags, self._send_delays = [], [], []
        sent, finished, in_flight = self._counts()
        s99 = percentile(sched, 99.0) * 1000.0
        l99 = percentile(loop, 99.0) * 1000.0
        lateness = read_lateness(loop, TICK_S) * 1000.0
        send99 = percentile(send, 99.0) * 1000.0
        saturated, reason = judge(s99, lateness, cpu_percent, send99)
        health = WorkerHealth(
            worker=self.worker,
            interval=self._interval if self._interval is not None else int(now // self.interval_s),
            t=now,
            sent=sent - self._base[0],
            finished=finished - self._base[1],
            in_flight=in_flight,
            schedule_lag_p99_ms=s99,
            schedule_lag_max_ms=max(sched, default=0.0) * 1000.0,
            loop_lag_p99_ms=l99,
            loop_lag_max_ms=max(loop, default=0.0) * 1000.0,
            cpu_percent=cpu_percent,
            saturated=saturated,
            reason=reason,
            read_lateness_ms=lateness,
            send_delay_p99_ms=send99,
        )
        self._base = (sent, finished)
        self._emit(health)
        return health

    async def run(self) -> None:
        """The ticker: sleeps TICK_S, records how late it woke, closes intervals. Cancel to stop."""
        clock, run_start = self._clock, self.run_start
        self.start()
        expected = clock() + TICK_S
        while True:
            await asyncio.sleep(TICK_S)
            wall = clock()
            self.note_loop_lag(max(0.0, wall - expected))
            expected = wall + TICK_S
            now = wall - run_start
            if self._on_tick is not None:
                self._on_tick(now)
            self.check(now)
