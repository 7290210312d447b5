from __future__ import annotations

import math
import random

import pytest

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.cells import finish_time
from speclab.model.names import PROM_QUEUE_TIME, Metric
from speclab.model.records import Event, RequestRecord, ServerSample, SpecCounts
from speclab.model.snapshot import ALL_CLASSES, ClientHealth

V = ["base", "k3"]
C = ["qa", "tool"]


def rec(
    n: int,
    done: float,
    *,
    variant: str = "k3",
    cls: str = "qa",
    lag: float = 0.001,
    ttft: float = 0.05,
    warmup: bool = False,
    error: str | None = None,
    spec: SpecCounts | None = None,
    schema_valid: bool | None = None,
    server: bool = True,
    tokens: int = 20,
) -> RequestRecord:
    sent = done - 0.3
    intended = sent - lag
    r = RequestRecord(request_id=f"r{n}", variant=variant, prompt_class=cls, intended=intended, sent=sent)
    r.warmup = warmup
    if error:
        r.error_kind = error
        r.first_token = sent + ttft
        return r
    r.first_token = sent + ttft
    r.last_token = done - 0.001
    r.done = done
    r.output_tokens = tokens
    r.schema_valid = schema_valid
    if server:
        r.server_queue_ms, r.server_prefill_ms, r.server_decode_ms = 2.0, 30.0, 200.0
    if spec is not None:
        r.spec = spec
    return r


def spec(steps: int, hist: list[int], source: str = "exact") -> SpecCounts:
    accepted = sum(j * n for j, n in enumerate(hist))
    k = len(hist) - 1
    return SpecCounts(steps=steps, drafted=steps * k, accepted=accepted, histogram=hist, num_spec_tokens=k, source=source)


def test_interval_assignment_by_finish_time() -> None:
    agg = Aggregator(V, C, close_delay_s=0.5)
    agg.add_records([rec(1, 0.2), rec(2, 0.9), rec(3, 1.5), rec(4, 1.7, error="http_5xx")])
    agg.tick(1.4)
    assert agg.last_closed_interval == -1  # interval 0 waits close_delay_s past its end
    agg.tick(1.5)
    assert agg.last_closed_interval == 0
    assert agg.snapshot(1.5).last_interval["k3"].classes["qa"].requests == 2
    agg.tick(2.6)
    assert agg.last_closed_interval == 1
    last = agg.snapshot(2.6).last_interval["k3"].classes["qa"]
    assert last.requests == 1 and last.errors == {"http_5xx": 1} and last.window_s == 1.0
    assert agg.window(0, 0)["k3"].total.requests == 2
    # a failed request belongs to the interval of its last activity (first_token here)
    failed = rec(5, 3.9, error="timeout")
    agg.add_records([failed])
    agg.tick(4.6)
    assert agg.window(3, 3)["k3"].total.errors == {"timeout": 1}


def test_warmup_measured_but_excluded_from_cumulative() -> None:
    agg = Aggregator(V, C, warmup_s=1.0)
    agg.add_records([rec(1, 0.5, warmup=True), rec(2, 0.7, warmup=True), rec(3, 0.8)])
    snap = agg.snapshot(1.6)
    assert snap.last_interval["k3"].total.requests == 3
    assert snap.cumulative["k3"].total.requests == 1
    assert snap.cumulative["k3"].total.latency[Metric.E2E.value].count == 1
    # the window starts at the first measured request's intended time (0.8 - 0.3 - 0.001)
    assert snap.cumulative["k3"].total.window_s == pytest.approx(1.6 - 0.499)
    assert agg.window(0, 0)["k3"].total.requests == 1


def test_acceptance_is_ratio_of_sums_and_all_row_sums_classes() -> None:
    agg = Aggregator(V, C)
    records = [
        rec(1, 0.1, cls="qa", spec=spec(4, [1, 1, 1, 1])),
        rec(2, 0.2, cls="qa", spec=spec(2, [0, 0, 0, 2])),
        rec(3, 0.3, cls="tool", spec=spec(5, [5, 0, 0, 0])),
        rec(4, 0.4, cls="tool", variant="base"),
    ]
    agg.add_records(records)
    snap = agg.snapshot(2.0)
    qa = snap.cumulative["k3"].classes["qa"].acceptance
    assert (qa.steps, qa.drafted, qa.accepted) == (6, 18, 12)
    assert qa.histogram == (1, 1, 1, 3)
    assert qa.acceptance_rate == pytest.approx(12 / 18)
    assert qa.rejection_rate == pytest.approx(6 / 18)
    assert qa.acceptance_length == pytest.approx(1 + 12 / 6)
    assert qa.verifications_per_request == 3.0
    assert qa.per_position == pytest.approx((5 / 6, 4 / 6, 3 / 6))
    assert qa.source == "exact"
    tool = snap.cumulative["k3"].classes["tool"].acceptance
    everything = snap.cumulative["k3"].classes[ALL_CLASSES].acceptance
    assert everything.steps == qa.steps + tool.steps
    assert everything.accepted == qa.accepted + tool.accepted
    assert everything.drafted == qa.drafted + tool.drafted
    assert everything.histogram == (6, 1, 1, 3)
    assert everything.requests == 3
    assert snap.cumulative["base"].total.acceptance.source == "none"
    assert snap.cumulative["base"].total.acceptance.rejection_rate is None


def test_estimated_source_wins_in_a_mix() -> None:
    agg = Aggregator(V, C)
    agg.add_records([rec(1, 0.1, spec=spec(2, [1, 1])), rec(2, 0.2, spec=spec(2, [0, 2], source="estimated"))])
    assert agg.snapshot(0.3).cumulative["k3"].total.acceptance.source == "estimated"


def test_structured_failures_errors_and_throughput() -> None:
    agg = Aggregator(V, C)
    agg.add_records(
        [
            rec(1, 0.1, cls="tool", schema_valid=True),
            rec(2, 0.2, cls="tool", schema_valid=False),
            rec(3, 0.3, cls="tool", schema_valid=True),
            rec(4, 0.4, cls="tool", schema_valid=True),
            rec(5, 0.5, cls="qa"),
            rec(6, 0.6, error="http_429"),
            rec(7, 0.7, error="http_429"),
            rec(8, 0.8, error="stall"),
        ]
    )
    snap = agg.snapshot(2.0)
    tool = snap.cumulative["k3"].classes["tool"]
    assert tool.structured_total == 4 and tool.structured_failed == 1
    assert tool.structured_failure_rate == 0.25
    total = snap.cumulative["k3"].total
    assert total.errors == {"http_429": 2, "stall": 1} and total.error_count == 3
    assert total.requests == 5 and total.output_tokens == 100
    # 5 successes over the span from the first intended time (0.1 - 0.301) to now
    assert total.requests_per_s == pytest.approx(5 / (2.0 + 0.201))
    assert snap.cumulative["k3"].classes["qa"].structured_failure_rate is None


def test_throughput_window_is_the_measured_traffic_not_the_run_clock() -> None:
    # traffic begins 1.5 s into the run (worker start-up); 10 requests at 5 req/s per variant, and
    # with --sequential the second variant's phase starts when the first one's ends
    agg = Aggregator(V, C)
    first = [rec(i, 1.5 + 0.2 * i + 0.3, variant="base", lag=0.0) for i in range(10)]
    second = [rec(10 + i, 3.6 + 0.2 * i + 0.3, variant="k3", lag=0.0) for i in range(10)]
    agg.add_records(first)
    live = agg.snapshot(3.7)
    assert live.cumulative["base"].total.window_s == pytest.approx(3.7 - 1.5)
    agg.add_records(second)
    final = agg.snapshot(6.0, finished=True)
    base, k3 = final.cumulative["base"].total, final.cumulative["k3"].total
    assert base.window_s == pytest.approx(2.1)  # first intended 1.5 to last finish 3.6
    assert k3.window_s == pytest.approx(2.1)  # its own phase, not the run from 0 or from 1.5
    assert base.requests_per_s == pytest.approx(10 / 2.1)
    assert final.cumulative["base"].classes["qa"].window_s == base.window_s
    assert Aggregator(V, C).snapshot(1.0).cumulative["k3"].total.requests_per_s == 0.0


def _random_records(seed: int, n: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        done = rng.uniform(0.0, 6.0)
        out.append(
            rec(
                i,
                done,
                variant=rng.choice(V),
                cls=rng.choice(C),
                lag=rng.expovariate(50),
                ttft=rng.uniform(0.01, 0.2),
                warmup=done < 0.5 and rng.random() < 0.5,
                error="timeout" if rng.random() < 0.05 else None,
                spec=spec(3, [rng.randrange(3), 1, 0, rng.randrange(2)]),
                schema_valid=rng.random() < 0.9,
            )
        )
    return out


def _batches(records: list[RequestRecord], step: float) -> list[tuple[float, list[RequestRecord]]]:
    """Records in the order a live run would ship them: every ``step`` seconds, those finished since."""
    out: dict[int, list[RequestRecord]] = {}
    for r in records:
        out.setdefault(max(0, math.floor(finish_time(r) / step)), []).append(r)
    return [((i + 1) * step, out[i]) for i in sorted(out)]


def test_corrected_never_below_uncorrected() -> None:
    agg = Aggregator(V, C)
    agg.add_records(_random_records(1, 300))
    for variant in agg.snapshot(7.0, finished=True).cumulative.values():
        for row in variant.classes.values():
            for plain, corrected in ((Metric.TTFT, Metric.TTFT_CORRECTED), (Metric.E2E, Metric.E2E_CORRECTED)):
                a, b = row.latency[plain.value], row.latency[corrected.value]
                assert a.count == b.count > 0
                assert all(x <= y for x, y in zip(a.values, b.values, strict=True))


def test_window_over_all_intervals_equals_cumulative() -> None:
    agg = Aggregator(V, C)
    records = _random_records(2, 400)
    for now, batch in _batches(records, 0.25):
        agg.add_records(batch)
        agg.tick(now)
    final = agg.snapshot(6.2, finished=True)
    window = agg.window(0, agg.last_closed_interval)
    for variant in V:
        for name, row in final.cumulative[variant].classes.items():
            other = window[variant].classes[name]
            assert row.latency == other.latency
            assert (row.requests, row.errors, row.output_tokens) == (other.requests, other.errors, other.output_tokens)
            assert row.acceptance == other.acceptance
            assert row.structured_failed == other.structured_failed


def test_replay_from_records_equals_live() -> None:
    records = _random_records(3, 300)
    live = Aggregator(V, C)
    for now, batch in _batches(records, 0.25):
        live.add_records(batch)
        live.snapshot(now)
    live_final = live.snapshot(6.3, finished=True)
    shuffled = records[:]
    random.Random(9).shuffle(shuffled)
    replay = Aggregator.from_records(shuffled, V, C, end_t=6.3)
    replay_final = replay.snapshot(6.3, finished=True)
    assert replay_final.cumulative == live_final.cumulative
    for index in range(live.last_closed_interval + 1):
        assert replay.window(index, index) == live.window(index, index)
    assert list(replay.iter_closed_intervals()) != []


def test_late_record_merges_into_its_closed_interval() -> None:
    agg = Aggregator(V, C)
    agg.add_records([rec(1, 0.2)])
    agg.tick(3.0)
    agg.add_records([rec(2, 0.4)])
    assert agg.late_records == 1
    assert agg.window(0, 0)["k3"].total.requests == 2
    assert agg.window(0, 0)["k3"].total.latency[Metric.E2E.value].count == 2


def test_snapshot_carries_servers_events_health_and_timing_sources() -> None:
    agg = Aggregator(V, C, simulated=False)
    agg.add_records([rec(1, 0.2, server=True), rec(2, 0.3, variant="base", server=False)])
    agg.add_server_sample(ServerSample(t=0.5, variant="base", running=3, histograms={
        PROM_QUEUE_TIME: {"buckets": [(0.3, 1.0)], "sum": 0.01, "count": 1.0}}))
    agg.add_server_sample(ServerSample(t=1.0, variant="base", running=4))
    agg.add_event(Event(t=0.4, kind="relaunch", message="k3 relaunched", variant="k3"))
    agg.tick(0.6)
    agg.set_health(ClientHealth(saturated=True, reason="schedule lag"))
    agg.mark_saturated(4)
    snap = agg.snapshot(1.6)
    assert snap.servers["base"].running == 4
    assert [e.kind for e in snap.events] == ["relaunch"]
    assert agg.snapshot(1.7).events == ()
    assert snap.saturated_intervals == (0, 4)
    assert snap.health.saturated and not snap.simulated
    assert snap.cumulative["k3"].total.timing_source == "exact"
    assert snap.cumulative["base"].total.timing_source == "server_metrics"
    # One queue time in the 0..0.3 s bucket: the median's estimate is its middle, at bucket resolution.
    assert snap.cumulative["base"].total.latency[Metric.SERVER_QUEUE.value].p50 == pytest.approx(150_000)
    assert snap.cumulative["base"].classes["tool"].timing_source == "none"
    assert snap.cumulative["k3"].total.latency[Metric.SERVER_QUEUE.value].p50 == pytest.approx(2000, rel=0.01)


def test_iter_closed_intervals_for_the_recorder() -> None:
    agg = Aggregator(V, C)
    agg.add_records([rec(1, 0.2), rec(2, 1.2, cls="tool", warmup=True)])
    agg.finish(1.5)
    items = list(agg.iter_closed_intervals())
    tags = {tag for _, _, _, tag, _ in items}
    assert "e2e_corrected.qa.k3.e1" in tags and not any(".tool." in t for t in tags)
    assert {(i, s, e) for i, s, e, _, _ in items} == {(0, 0.0, 1.0)}
    assert list(agg.iter_closed_intervals(since=0)) == []
    hist = next(h for *_, tag, h in items if tag == "ttft.qa.k3.e1").decode()
    assert hist.count == 1
    assert agg.snapshot(1.5, finished=True).last_interval["k3"].classes["tool"].requests == 1


def test_unknown_class_and_variant_are_added() -> None:
    agg = Aggregator(V, C)
    agg.add_records([rec(1, 0.2, cls="new", variant="attached")])
    snap = agg.snapshot(0.5)
    assert snap.cumulative["attached"].classes["new"].requests == 1


def test_saturation_marks_the_interval_the_report_covers() -> None:
    agg = Aggregator(V, C)
    agg.snapshot(2.3)
    agg.set_health(ClientHealth(saturated=True, reason="schedule lag"), interval=1)
    agg.set_health(ClientHealth(saturated=False), interval=2)
    assert agg.snapshot(2.5).saturated_intervals == (1,)
    agg.set_health(ClientHealth(saturated=True))
    assert agg.snapshot(2.6).saturated_intervals == (1, 2)


def test_server_timing_from_metrics_histograms_reads_like_histogram_quantile_and_mixed_sources_say_so() -> None:
    from speclab.metrics.server_timing import ServerHistogram

    hist = ServerHistogram()
    hist.add({"buckets": [(0.01, 50.0), (0.05, 40.0), (0.1, 10.0), (math.inf, 0.0)], "sum": 2.0, "count": 100.0})
    pct = hist.percentiles()
    assert pct.count == 100 and pct.mean == pytest.approx(20_000)
    assert pct.p50 == pytest.approx(10_000) and pct.p90 == pytest.approx(50_000)
    assert pct.p99 == pytest.approx(95_000)  # 9 of the 10 in (0.05, 0.1]: linear inside the bucket
    agg = Aggregator(V, C)
    agg.add_records([rec(1, 0.2, server=True), rec(2, 0.3, server=False)])
    snap = agg.snapshot(1.0, finished=True)
    assert snap.cumulative["k3"].total.timing_source == "mixed"


def test_saturation_flags_the_intervals_where_the_affected_requests_finished_whatever_the_order() -> None:
    for health_first in (True, False):
        agg = Aggregator(V, C)
        if health_first:
            agg.mark_saturated(4)
        agg.add_records([rec(1, 6.2), rec(2, 4.35), rec(3, 8.5)])  # sent at 5.9, 4.05 and 8.2
        agg.add_records([rec(4, 4.6)])  # sent at 4.3 and finished at 4.6: interval 4 itself
        slow = rec(5, 7.5)
        slow.sent, slow.intended = 4.5, 4.499  # sent during interval 4, finished in interval 7
        agg.add_records([slow])
        if not health_first:
            agg.mark_saturated(4)
        assert agg.snapshot(9.0, finished=True).saturated_intervals == (4, 7), health_first


def test_the_run_health_is_the_worst_interval_not_the_last() -> None:
    agg = Aggregator(V, C)
    agg.set_health(ClientHealth(schedule_lag_p99_ms=9.0, loop_lag_max_ms=1.0, cpu_percent=80.0,
                                send_delay_p99_ms=2.0, read_lateness_ms=6.0), interval=2)
    agg.set_health(ClientHealth(schedule_lag_p99_ms=1.0, loop_lag_max_ms=3.0, cpu_percent=10.0,
                                send_delay_p99_ms=7.5, read_lateness_ms=1.0), interval=3)
    snap = agg.snapshot(4.0)
    assert snap.health.schedule_lag_p99_ms == 1.0
    run = snap.run_health
    assert (run.schedule_lag_p99_ms, run.loop_lag_max_ms, run.cpu_percent) == (9.0, 3.0, 80.0)
    assert (run.send_delay_p99_ms, run.read_lateness_ms) == (7.5, 6.0)
