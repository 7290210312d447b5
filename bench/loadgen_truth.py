"""Ground truth for a load generator's accuracy: its TTFT against the server's own record, per request.

A client's TTFT (first token read − sent, on its clock) minus the server's TTFT of the same request
(first token chunk handed to the socket − the request's first bytes received, on the server's
clock), matched by ``X-Request-Id``, is the time the client added: its way out, its way back and
how late its event loop read the chunk. Both are durations on one host, so no clock has to be
aligned with another. ``interval_truth`` gives that error's p99 per 1 s interval of the client's
clock, which is what a client-side health flag has to predict; ``score_flag`` says how often a
flag did.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (NaN for no values). Kept apart from speclab's own on purpose: the ground
    truth does not import the client it judges."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[rank]


@dataclass(frozen=True, slots=True)
class ServerRecord:
    request_id: str
    rx_kernel: float
    rx_read: float
    first_write: float | None
    done_write: float | None
    tokens: int
    aborted: bool

    @property
    def ttft(self) -> float | None:
        return None if self.first_write is None else self.first_write - self.rx_kernel

    @property
    def read_lag(self) -> float:
        """How long the request's first bytes waited in the socket before the server's loop read them."""
        return self.rx_read - self.rx_kernel


@dataclass(frozen=True)
class ServerLog:
    records: dict[str, ServerRecord]
    cpu_s: float  # the server's whole life
    traffic_cpu_s: float  # from the first generation request's arrival to the last one's end
    settings: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> ServerLog:
        data = json.loads(path.read_text())
        names = data["fields"]
        records = {}
        for row in data["records"]:
            item = dict(zip(names, row, strict=True))
            records[item["request_id"]] = ServerRecord(
                item["request_id"], item["rx_kernel"], item["rx_read"], item["first_write"], item["done_write"],
                int(item["tokens"]), bool(item["aborted"]))
        return cls(records, float(data["cpu_s"]), float(data["traffic_cpu_s"]), dict(data["settings"]))


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """What a client recorded of one request, in seconds on its own clock (any origin)."""

    request_id: str
    intended: float
    sent: float | None
    first_token: float | None
    done: float | None
    ok: bool


@dataclass(frozen=True, slots=True)
class Pair:
    request_id: str
    error: float  # client TTFT − server TTFT, seconds
    lag: float  # client sent − intended
    first_token: float  # client clock
    done: float | None  # client clock


def match(client: Iterable[ClientRecord], server: dict[str, ServerRecord]) -> list[Pair]:
    """One pair per request both sides saw through to its first token."""
    pairs = []
    for rec in client:
        theirs = server.get(rec.request_id)
        if theirs is None or theirs.ttft is None or rec.first_token is None or rec.sent is None:
            continue
        pairs.append(Pair(rec.request_id, (rec.first_token - rec.sent) - theirs.ttft, rec.sent - rec.intended,
                          rec.first_token, rec.done))
    return pairs


@dataclass(frozen=True, slots=True)
class IntervalTruth:
    index: int  # interval [index·s, (index+1)·s) of the client's clock
    requests: int
    error_p50_ms: float
    error_p99_ms: float
    error_max_ms: float


def interval_truth(pairs: Iterable[Pair], *, interval_s: float = 1.0, at: str = "first_token") -> list[IntervalTruth]:
    """The true TTFT error per interval of the client's clock.

    ``at="first_token"`` puts a request in the interval in which the client read its first token
    (when the error happened, so a flag judged on that interval's lags and lateness should see it);
    ``at="done"`` in the interval it finished, as speclab's reports group requests. Intervals with no
    request are left out.
    """
    if at not in ("first_token", "done"):
        raise ValueError(f"at: expected 'first_token' or 'done', got {at!r}")
    groups: dict[int, list[float]] = {}
    for pair in pairs:
        t = pair.first_token if at == "first_token" else pair.done
        if t is None:
            continue
        groups.setdefault(math.floor(t / interval_s), []).append(pair.error * 1000.0)
    return [IntervalTruth(index, len(errors), percentile(errors, 50), percentile(errors, 99), max(errors))
            for index, errors in sorted(groups.items())]


@dataclass(frozen=True, slots=True)
class FlagScore:
    threshold_ms: float
    bad: int  # intervals whose true error p99 is above the threshold
    caught: int  # of those, flagged
    good: int
    false_alarms: int  # accurate intervals flagged

    @property
    def hit_rate(self) -> float:
        return self.caught / self.bad if self.bad else math.nan

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.good if self.good else math.nan


def score_flag(truth: Iterable[IntervalTruth], flagged: Iterable[int], threshold_ms: float,
               *, min_requests: int = 1) -> FlagScore:
    """How a client's per-interval health flag did against the truth (intervals with fewer than
    ``min_requests`` measured requests are not judged)."""
    marked = set(flagged)
    bad = caught = good = false_alarms = 0
    for row in truth:
        if row.requests < min_requests:
            continue
        if row.error_p99_ms > threshold_ms:
            bad += 1
            caught += row.index in marked
        else:
            good += 1
            false_alarms += row.index in marked
    return FlagScore(threshold_ms, bad, caught, good, false_alarms)
