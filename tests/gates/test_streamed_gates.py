"""The gates' accumulators judge a stream of batches exactly as they judge the whole list at once."""

from __future__ import annotations

import math
import random

from speclab.gates.answered import AnsweredTally, check_answered
from speclab.gates.canary import CanaryTally, evaluate_canary
from speclab.gates.canary_watch import CanaryWatch, CanaryWatchTally, watch_canary
from speclab.gates.latency import BusySpans
from speclab.gates.stages import CANARY
from speclab.metrics.cells import finish_time
from speclab.metrics.groups import group_stats
from speclab.model.gates import AcceptanceFloors, CanaryGate
from speclab.model.names import Metric
from speclab.model.records import Event, RequestRecord, SpecCounts


def _records(seed: int = 5, n: int = 1500) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        variant = rng.choice(["baseline", "k4", "k4", "k2"])
        done = i / 40 + rng.uniform(0.0, 0.5)
        r = RequestRecord(request_id=f"r{i}", variant=variant, prompt_class=rng.choice(["qa", "json", "code"]),
                          intended=done - 0.8, sent=done - 0.79, first_token=done - 0.5, last_token=done - 0.01,
                          done=done, output_tokens=rng.randrange(8, 64), backend=variant, output_text="{" * 150)
        if rng.random() < 0.02:
            r.error_kind, r.error_message, r.done = rng.choice(["stall", "http_5xx"]), "no data", None
        if variant != "baseline":
            hist = [rng.randrange(4) for _ in range(5)]
            r.spec = SpecCounts(sum(hist), 4 * sum(hist), sum(j * c for j, c in enumerate(hist)), hist, 4, "exact")
        if r.prompt_class == "json":
            r.schema_valid = rng.random() > 0.05
        out.append(r)
    return out


def _batches(records: list[RequestRecord], seed: int = 9) -> list[list[RequestRecord]]:
    """Out of order a little, as worker flushes arrive."""
    rng = random.Random(seed)
    shuffled = sorted(records, key=lambda r: finish_time(r) + rng.uniform(0.0, 0.3))
    out, i = [], 0
    while i < len(shuffled):
        step = rng.randrange(1, 25)
        out.append(shuffled[i:i + step])
        i += step
    return out


def test_answered_canary_and_busy_span_tallies_equal_the_list() -> None:
    batches = _batches(_records())
    records = [r for batch in batches for r in batch]  # as they arrived
    answers, canary, spans = AnsweredTally(), CanaryTally(), BusySpans()
    for batch in batches:
        for sink in (answers, canary, spans):
            sink.add(batch)
    assert check_answered(CANARY, answers, allowed_error_pct=1.0) == check_answered(CANARY, records, allowed_error_pct=1.0)
    assert answers.error_kinds() == {v: {str(r.error_kind) for r in records if r.variant == v and r.error_kind}
                                     for v in ("baseline", "k4", "k2")}
    settings, floors = CanaryGate(), AcceptanceFloors()
    assert evaluate_canary(settings, floors, "baseline", canary) == evaluate_canary(settings, floors, "baseline", records)
    for v in ("baseline", "k4"):
        mine = [r for r in records if r.variant == v]
        done = max(r.done for r in mine if r.ok and r.done is not None)
        tokens = sum(r.output_tokens for r in mine if r.ok)
        assert spans.throughput(v) == tokens / (done - min(r.sent for r in mine if r.sent is not None))


def test_the_canary_watch_streamed_equals_the_list_and_its_p99s_are_the_groups() -> None:
    batches = _batches(_records())
    records = [r for batch in batches for r in batch]  # as they arrived
    events = [Event(t=5.0, kind="weight_change", message="gateway: k4 10%")]
    tally = CanaryWatchTally("baseline")
    for batch in batches:
        tally.add(batch)
    def watch(source: CanaryWatchTally | list[RequestRecord]) -> CanaryWatch:
        return watch_canary(source, "baseline", events, max_structured_pct=1.0, max_p99_ratio=1.1,
                            max_spike_points=5.0, min_interval_drafted=20)
    streamed = watch(tally)
    assert streamed == watch(records)
    assert streamed.spikes and streamed.structured_samples and streamed.failures
    for variant in ("k4", "baseline"):
        rows = [r for r in records if r.variant == variant and math.floor(finish_time(r)) == 7]
        p99 = group_stats(rows).latency[Metric.E2E_CORRECTED.value].p99
        assert p99 is not None and tally.intervals[variant][7].p99_ms() == p99 / 1000.0
