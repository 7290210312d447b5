"""Config epochs in the aggregator: nothing summed across epochs, transitions apart, A/B from windows.

The story in every test: ``k4`` runs with k=4; a relaunch to k=6 is asked at t=10.4 s (the
``transition`` event); its new server answers at t=12.6 s (the ``relaunch`` event, epoch 2).
Records sent to epoch 1 that finish after 10.4 s belong to the transition, whatever their outcome.
"""

from __future__ import annotations

import random

import pytest

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.cells import finish_time
from speclab.metrics.epochs import EpochBook
from speclab.metrics.hdr import LatencyHistogram
from speclab.model.acceptance import steps_drafting_position
from speclab.model.epochs import RELAUNCH_EVENT, TRANSITION_EVENT, epoch_label
from speclab.model.names import Metric
from speclab.model.records import Event, RequestRecord, SpecCounts
from speclab.model.snapshot import ALL_CLASSES, AcceptanceStats

ASKED, ANSWERED = 10.4, 12.6
K4 = {"num_speculative_tokens": 4, "max_num_seqs": 64, "method": "draft_model"}
K6 = {**K4, "num_speculative_tokens": 6}


def transition(t: float = ASKED) -> Event:
    return Event(t=t, kind=TRANSITION_EVENT, message="k4: relaunching", variant="k4",
                 data={"from_epoch": 1, "to_epoch": 2})


def relaunch(t: float = ANSWERED) -> Event:
    return Event(t=t, kind=RELAUNCH_EVENT, message="k4 relaunched", variant="k4",
                 data={"epoch": 2, "settings": K6, "changes": {"num_speculative_tokens": {"from": 4, "to": 6}}})


def record(n: int, sent: float, e2e: float, *, variant: str = "k4", epoch: int = 1, k: int = 4,
           error: str | None = None, cls: str = "qa", warmup: bool = False) -> RequestRecord:
    r = RequestRecord(request_id=f"{variant}-{n}", variant=variant, prompt_class=cls, intended=sent - 0.001,
                      sent=sent, epoch=epoch, warmup=warmup)
    if error is not None:
        r.error_kind, r.done = error, sent + e2e
        return r
    r.first_token, r.last_token, r.done = sent + 0.02, sent + e2e - 0.001, sent + e2e
    r.output_tokens = 20
    if k:
        hist = [1] * (k + 1)  # one step accepting each of 0..k drafts
        r.spec = SpecCounts(steps=k + 1, drafted=(k + 1) * k, accepted=sum(range(k + 1)), histogram=hist,
                            num_spec_tokens=k, source="exact")
    return r


def traffic(seed: int = 3) -> list[RequestRecord]:
    """Five requests a second from t=0 to 20 s to both variants; k4's across the relaunch."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for n in range(100):
        sent = 0.2 * n + 0.01
        e2e = rng.uniform(0.05, 0.3)
        out.append(record(n, sent, e2e, variant="baseline", k=0))
        if sent + e2e < ASKED:
            out.append(record(n, sent, e2e))
        elif sent < ASKED:  # in flight when the relaunch was asked: killed by the restart
            out.append(record(n, sent, ASKED + 0.05 - sent, error="truncated"))
        elif sent < ANSWERED:  # refused while down, or slow while the new server warms up
            if n % 2:
                out.append(record(n, sent, 0.01, error="connect"))
            else:
                out.append(record(n, sent, 5.0))
        else:
            out.append(record(n, sent, e2e, epoch=2, k=6))
    return out


def aggregate(records: list[RequestRecord], end: float = 20.0, *, feed: str = "live") -> Aggregator:
    """Fed as the live session feeds it: events as they happen, records as they finish, ticks between."""
    agg = Aggregator(["baseline", "k4"], ["qa"])
    agg.launch("baseline", {"max_num_seqs": 64}, baseline=True)
    agg.launch("k4", K4)
    events = [transition(), relaunch()]
    pending = sorted(records, key=finish_time)
    t = 0.0
    while t < end:
        t = round(t + 0.25, 2)
        for event in [e for e in events if e.t <= t]:
            agg.add_event(event)
            events.remove(event)
        ready = [r for r in pending if finish_time(r) <= t]
        pending = pending[len(ready):]
        agg.add_records(ready)
        agg.tick(t)
    agg.add_records(pending)
    return agg


def test_labels_name_what_changed_from_the_launched_config() -> None:
    assert epoch_label("k4", 1, K4, K4) == "k4"
    assert epoch_label("k4", 2, K4, K6) == "k4·2 (k=6)"
    assert epoch_label("k4", 3, K4, {**K6, "max_num_seqs": 4}) == "k4·3 (k=6 seqs=4)"
    assert epoch_label("k4", 2, K4, K4) == "k4·2"


def test_every_record_counts_in_exactly_one_epoch_or_the_transition() -> None:
    book = EpochBook()
    book.launch("k4", K4)
    book.on_event(transition())
    book.on_event(relaunch())
    records = [r for r in traffic() if r.variant == "k4"]
    places = [book.place(r) for r in records]
    before = [r for r, p in zip(records, places, strict=True) if p == 1]
    after = [r for r, p in zip(records, places, strict=True) if p == 2]
    apart = [r for r, p in zip(records, places, strict=True) if p is None]
    assert len(before) + len(after) + len(apart) == len(records)
    assert all(finish_time(r) < ASKED for r in before) and all(r.sent >= ANSWERED for r in after if r.sent)
    (moved,) = book.transitions()
    assert (moved.from_epoch, moved.to_epoch, moved.start_s, moved.end_s) == (1, 2, ASKED, ANSWERED)
    assert moved.requests == len(apart) and sum(moved.errors.values()) == sum(1 for r in apart if not r.ok)
    assert set(moved.errors) == {"connect", "truncated"}
    info = book.epochs("k4")
    assert [(e.epoch, e.label, e.start_s, e.end_s) for e in info] == [(1, "k4", 0.0, ASKED), (2, "k4·2 (k=6)", ANSWERED, None)]


def test_epochs_are_never_summed_and_keep_their_own_histogram_lengths() -> None:
    agg = aggregate(traffic())
    final = agg.snapshot(20.0, finished=True)
    first, second = final.epochs["k4"]
    assert (first.info.epoch, second.info.epoch) == (1, 2)
    a1, a2 = first.stats.total.acceptance, second.stats.total.acceptance
    assert len(a1.histogram) == 5 and len(a1.per_position) == 4
    assert len(a2.histogram) == 7 and len(a2.per_position) == 6
    # Each step drafted every position here: position i is accepted by the steps accepting > i.
    assert a1.per_position == pytest.approx([4 / 5, 3 / 5, 2 / 5, 1 / 5])
    assert a2.per_position == pytest.approx([6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7])
    assert final.cumulative["k4"] is second.stats and second.stats.label == "k4·2 (k=6)"
    k4 = [r for r in traffic() if r.variant == "k4"]
    (moved,) = final.transitions
    assert first.stats.total.requests + second.stats.total.requests + moved.requests == len(k4)
    assert first.stats.total.error_count == second.stats.total.error_count == 0, "the restart's failures"
    e2e_max = max(e.stats.total.latency[Metric.E2E.value].max or 0 for e in (first, second))
    assert e2e_max < 1_000_000, "the 5 s requests of the warming server are in neither epoch"
    tags = {tag for *_, tag, _ in agg.iter_closed_intervals()}
    assert "e2e.qa.k4.e1" in tags and "e2e.qa.k4.e2" in tags and "e2e.qa.baseline.e1" in tags


def test_replay_from_records_and_events_equals_the_live_feed() -> None:
    records = traffic()
    live = aggregate(records).snapshot(20.0, finished=True)
    again = Aggregator.from_records(records, ["baseline", "k4"], ["qa"], end_t=20.0,
                                    events=[transition(), relaunch()])
    replayed = again.snapshot(20.0, finished=True)
    for ours, theirs in zip(live.epochs["k4"], replayed.epochs["k4"], strict=True):
        assert ours.stats.total.requests == theirs.stats.total.requests
        assert ours.stats.total.acceptance == theirs.stats.total.acceptance
    assert live.transitions == replayed.transitions


def test_ab_compares_whole_intervals_inside_each_epoch_and_excludes_the_transition() -> None:
    records = traffic()
    agg = aggregate(records, end=21.0)
    view = agg.snapshot(21.0, finished=True).ab["k4"]
    cur, prev = view.current, view.previous
    assert prev is not None and view.baseline == "baseline"
    assert (cur.epoch, cur.label, prev.epoch, prev.label) == (2, "k4·2 (k=6)", 1, "k4")
    # Current: whole intervals from the first one after the new server answered (12.6 s) to the end.
    assert (cur.first_interval, cur.last_interval) == (13, 20)
    # Previous: as many whole intervals, ending with the last one before the relaunch was asked (10.4 s).
    assert (prev.first_interval, prev.last_interval) == (2, 9) and prev.intervals == cur.intervals
    for window in (cur, prev):
        assert window.own.total.error_count == 0 and window.own.total.window_s == window.baseline.total.window_s

    def finished_in(variant: str, epoch: int, first: int, last: int) -> list[RequestRecord]:
        return [r for r in records if r.variant == variant and r.ok and r.epoch == epoch
                and first <= int(finish_time(r)) <= last and (variant != "k4" or r.epoch == 2 or finish_time(r) < ASKED)]

    for window, epoch in ((cur, 2), (prev, 1)):
        assert window.first_interval is not None and window.last_interval is not None
        own = finished_in("k4", epoch, window.first_interval, window.last_interval)
        base = finished_in("baseline", 1, window.first_interval, window.last_interval)
        assert window.own.total.requests == len(own) and window.baseline.total.requests == len(base)
        # A window percentile: the merged histogram's, not the worst 1 s interval's.
        merged = LatencyHistogram()
        for r in own:
            assert r.e2e is not None
            merged.record_s(r.e2e)
        assert window.own.total.latency[Metric.E2E.value].p99 == merged.percentiles().p99
    assert set(cur.own.classes) == {"qa", ALL_CLASSES}


def test_ab_previous_window_stops_where_the_previous_epoch_began() -> None:
    late = [record(200 + n, 20.0 + 0.2 * n, 0.1, epoch=2, k=6) for n in range(45)]
    late += [record(200 + n, 20.0 + 0.2 * n, 0.1, variant="baseline", k=0) for n in range(45)]
    agg = aggregate(traffic() + late, end=30.0)
    view = agg.snapshot(30.0, finished=True).ab["k4"]
    assert view.previous is not None and view.current.intervals > 10
    assert (view.previous.first_interval, view.previous.last_interval) == (0, 9)
    assert "fewer" in view.previous.note


def test_during_a_transition_the_current_window_stops_growing() -> None:
    agg = Aggregator(["baseline", "k4"], ["qa"])
    agg.launch("k4", K4)
    agg.add_records([record(n, 0.2 * n, 0.1) for n in range(40)]
                    + [record(n, 0.2 * n, 0.1, variant="baseline", k=0) for n in range(60)])
    agg.add_event(transition(8.0))
    view = agg.snapshot(12.0).ab["k4"]
    assert view.relaunching and view.previous is None
    assert (view.current.first_interval, view.current.last_interval) == (0, 7)


def test_steps_that_did_not_draft_a_position_do_not_count_against_it() -> None:
    # k = 3; 4 steps drafted 3 tokens and 2 steps only 1 (the step's token budget ran out).
    per_step = [3, 3, 3, 3, 1, 1]
    positions, exact = steps_drafting_position(6, 14, 3, [2, 2, 1, 1], per_step)
    assert positions == [6, 4, 4] and exact
    # From the sums alone (summary mode) the shortfall goes to the deepest positions: an estimate.
    positions, exact = steps_drafting_position(6, 14, 3, [2, 2, 1, 1])
    assert positions == [6, 6, 2] and not exact
    # A step that accepted a position drafted it: the estimate never goes below that.
    assert steps_drafting_position(4, 8, 3, [1, 1, 1, 1]) == ([4, 3, 1], False)
    assert steps_drafting_position(5, 15, 3, [1, 1, 1, 2]) == ([5, 5, 5], True)
    acc = AcceptanceStats(requests=1, steps=6, drafted=14, accepted=11, histogram=(2, 2, 1, 1), position_drafts=(6, 4, 4))
    assert acc.per_position == pytest.approx([4 / 6, 2 / 4, 1 / 4])


def test_detailed_per_step_counts_give_exact_positions_through_the_client_and_the_cells() -> None:
    from speclab.metrics.cells import Counts
    from speclab.servers.backends.vllm import exact_spec

    sd = {"acceptance_histogram": [2, 2, 1, 1], "num_spec_steps": 6, "num_draft_tokens": 14,
          "num_accepted_draft_tokens": 7, "num_spec_tokens": 3, "per_step_drafted": [3, 3, 3, 3, 1, 1]}
    spec = exact_spec(sd)
    assert spec.drafted_per_position == [6, 4, 4]
    r = record(1, 0.5, 0.1, k=0)
    r.spec = spec
    counts = Counts()
    counts.add_record(r)
    acc = counts.acceptance()
    assert acc.position_drafts == (6, 4, 4) and acc.position_source == "exact"
    assert acc.per_position == pytest.approx([4 / 6, 2 / 4, 1 / 4])
    summary = exact_spec({k: v for k, v in sd.items() if k != "per_step_drafted"})
    r.spec = summary
    counts = Counts()
    counts.add_record(r)
    assert counts.acceptance().position_drafts == (6, 6, 2) and counts.acceptance().position_source == "estimated"
