"""Where the time goes, in parts that add up: per request, ``e2e_corrected`` = schedule lag + server
queue + prefill + decode + a remainder (client + transport: connect, send, streaming, parsing).

Percentiles of parts never add up to a percentile of the whole, so the split is a composition of
the same requests: each successful request adds its parts to the bucket of its ``e2e_corrected``
(log buckets 2% wide), and a class's split "at p50" is the mean composition of the requests in
the bucket holding the p50, its tail the mean composition of the requests in the p99's bucket and
above. The sums are additive, so intervals, windows and classes merge them like every other count.
"""

from __future__ import annotations

import math

from speclab.model.records import RequestRecord
from speclab.model.snapshot import SplitRow

RATIO = 1.02
_LOG = math.log(RATIO)
# Per bucket: [requests, requests with server timing, schedule lag, queue, prefill, decode, e2e], sums
# of whole µs: integers add up the same in any order, so a live run and its replay agree exactly.
Sums = dict[int, list[int]]
_WIDTH = 7


def bucket_of(us: float) -> int:
    return math.floor(math.log(max(us, 1.0)) / _LOG)


def add_record(sums: Sums, record: RequestRecord) -> None:
    e2e, lag = record.e2e_corrected, record.schedule_lag
    if e2e is None or lag is None:
        return
    e2e_us = round(e2e * 1e6)
    row = sums.setdefault(bucket_of(e2e_us), [0] * _WIDTH)
    row[0] += 1
    server = (record.server_queue_ms, record.server_prefill_ms, record.server_decode_ms)
    if any(v is not None for v in server):
        row[1] += 1
    row[2] += round(lag * 1e6)
    for i, ms in enumerate(server):
        row[3 + i] += round((ms or 0.0) * 1000.0)
    row[6] += e2e_us


def merge(into: Sums, other: Sums) -> None:
    for bucket, row in other.items():
        mine = into.get(bucket)
        if mine is None:
            into[bucket] = list(row)
        else:
            for i, v in enumerate(row):
                mine[i] += v


def _row(rows: list[list[int]]) -> SplitRow | None:
    total = [sum(r[i] for r in rows) for i in range(_WIDTH)]
    n = total[0]
    if not n:
        return None
    lag, queue, prefill, decode, e2e = (v / n for v in total[2:])
    return SplitRow(requests=int(n), timed=int(total[1]), schedule_lag=lag, server_queue=queue,
                    server_prefill=prefill, server_decode=decode, remainder=e2e - lag - queue - prefill - decode,
                    e2e_corrected=e2e)


def split_at(sums: Sums, p50_us: float | None, p99_us: float | None) -> tuple[SplitRow | None, SplitRow | None]:
    """(the composition at p50, the tail's: the p99's bucket and above) for ``e2e_corrected`` percentiles."""
    if not sums or p50_us is None or p99_us is None:
        return None, None
    # A percentile is an HDR value (3 significant digits): it can round into a neighbouring bucket.
    target = bucket_of(p50_us)
    mid = sums[min(sums, key=lambda b: (abs(b - target), b))]
    tail_from = min(bucket_of(p99_us), max(sums))
    tail = [row for bucket, row in sums.items() if bucket >= tail_from]
    return _row([mid]), _row(tail)
