"""The split adds up: parts + the client-and-transport remainder = the corrected e2e of the same requests."""

from __future__ import annotations

import random

import pytest

from speclab.metrics.aggregator import Aggregator
from speclab.model.names import Metric
from speclab.model.records import RequestRecord


def _records(n: int) -> list[RequestRecord]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        intended = i * 0.01
        lag = rng.uniform(0.0, 0.004)
        queue = rng.expovariate(1 / 0.02) if i % 10 else 0.4  # every tenth request queues long: the tail
        prefill, decode, client = rng.uniform(0.01, 0.03), rng.uniform(0.05, 0.2), rng.uniform(0.001, 0.006)
        sent = intended + lag
        done = sent + queue + prefill + decode + client
        rec = RequestRecord(request_id=f"r{i}", variant="k4", prompt_class="tool_call", intended=intended, sent=sent,
                            first_token=sent + queue + prefill, last_token=done, done=done, output_tokens=20,
                            server_queue_ms=queue * 1000, server_prefill_ms=prefill * 1000,
                            server_decode_ms=decode * 1000)
        out.append(rec)
    return out


def test_parts_plus_remainder_equal_the_corrected_e2e_at_p50_and_for_the_tail() -> None:
    records = _records(2000)
    agg = Aggregator(["k4"], ["tool_call"])
    agg.add_records(records)
    stats = agg.snapshot(25.0, finished=True).cumulative["k4"].classes["tool_call"]
    e2e = stats.latency[Metric.E2E_CORRECTED.value]
    assert e2e.p50 is not None and e2e.p99 is not None
    mid, tail = stats.split_p50, stats.split_tail
    assert mid is not None and tail is not None
    for row in (mid, tail):
        assert sum(row.parts) == pytest.approx(row.e2e_corrected, rel=1e-9)
        assert row.timed == row.requests and row.remainder > 0
    # The group at p50 is the requests around the measured p50 (2% buckets); the tail is at least p99.
    assert mid.e2e_corrected == pytest.approx(e2e.p50, rel=0.03)
    assert tail.e2e_corrected >= e2e.p99 * 0.98 and tail.requests >= 20
    # Measured against the requests themselves: the tail's composition is theirs.
    cut = sorted(r.e2e_corrected or 0 for r in records)[int(0.99 * len(records)) - 1]
    slow = [r for r in records if (r.e2e_corrected or 0) >= cut * 0.98]
    queue = sum(r.server_queue_ms or 0 for r in slow) / len(slow) * 1000
    assert tail.server_queue == pytest.approx(queue, rel=0.1)
    assert tail.server_queue > 5 * mid.server_queue  # "queue or decode?" has an answer
