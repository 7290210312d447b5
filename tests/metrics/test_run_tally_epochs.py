"""The run tally keeps every figure in one config epoch: a relaunched variant gets one memory row and
one set of cross-check rows per epoch, each with its own server's facts and its own sums."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from speclab.headless.run import report_extra
from speclab.metrics.epochs import EpochBook
from speclab.metrics.run_tally import RunTally
from speclab.metrics.sim_drift import DriftJudge
from speclab.model.epochs import RELAUNCH_EVENT, TRANSITION_EVENT
from speclab.model.exit_codes import ExitCode
from speclab.model.records import Event, RequestRecord, ServerSample, SpecCounts
from speclab.model.time_scale import TimeScale
from speclab.servers.memory import EpochMemory, KvUsage, MemoryInfo, epoch_memory_table, memory_table

LABEL_2 = "k4·2 (max_num_seqs=64)"


@dataclass
class Server:
    variant: str
    memory: MemoryInfo
    baseline: bool = False
    settings: dict[str, Any] = field(default_factory=dict)


def _record(t: float, epoch: int, steps: int, accepted: int, done: float | None = None) -> RequestRecord:
    return RequestRecord(request_id=f"r{epoch}-{t}", variant="k4", prompt_class="qa", intended=t, sent=t,
                         done=t + 0.5 if done is None else done, epoch=epoch,
                         spec=SpecCounts(steps=steps, drafted=4 * steps, accepted=accepted,
                                         histogram=[steps - accepted // 2, 0, accepted // 2], num_spec_tokens=4,
                                         source="exact"))


def _sample(t: float, kv: float, drafts: float, accepted: float, variant: str = "k4") -> ServerSample:
    return ServerSample(t=t, variant=variant, kv_usage=kv, spec_drafts=drafts, spec_draft_tokens=4 * drafts,
                        spec_accepted=accepted, spec_accepted_per_pos=[accepted / 2, accepted / 2])


def _two_epochs() -> tuple[RunTally, dict[str, Server]]:
    """k4 runs epoch 1 on one server, is relaunched with max_num_seqs=64 at t=10 (its transition
    lasts until t=12), then runs epoch 2 on another; the baseline runs throughout."""
    book = EpochBook()
    tally = RunTally(book=book)
    base = Server("baseline", MemoryInfo(16.0, 400_000, 100.0, 4096), baseline=True)
    old = Server("k4", MemoryInfo(17.0, 300_000, 75.0, 4096), settings={"max_num_seqs": 256})
    new = Server("k4", MemoryInfo(17.0, 200_000, 50.0, 4096), settings={"max_num_seqs": 64})
    running = {"baseline": base, "k4": old}
    for server in running.values():
        book.launch(server.variant, server.settings)

    def event(e: Event) -> None:  # as LiveSession.add_event: the tally first, then the aggregator's book
        tally.add_event(e, running)
        book.on_event(e)

    tally.add_records([_record(float(i), 1, steps=10, accepted=6) for i in range(3)])
    tally.add_samples([_sample(1.0, 0.2, 20.0, 12.0), _sample(2.0, 0.4, 10.0, 6.0), _sample(1.0, 0.5, 0.0, 0.0, "baseline")])
    event(Event(t=10.0, kind=TRANSITION_EVENT, variant="k4", message="", data={"from_epoch": 1, "to_epoch": 2}))
    tally.add_samples([_sample(10.5, 0.9, 0.0, 0.0)])  # the old server's last scrape: no use of the epoch
    running["k4"] = new  # the relaunch replaces the running server before the new epoch begins
    # Sent during the transition, it waited for the new server (serving from t=10.8, after the old one
    # stopped) and finished before the new epoch began: the new server's, on both sides.
    tally.add_records([_record(11.0, 1, steps=4, accepted=2, done=11.8)])
    tally.add_samples([_sample(11.9, 0.0, 4.0, 2.0)])
    event(Event(t=12.0, kind=RELAUNCH_EVENT, variant="k4", message="",
                data={"epoch": 2, "label": LABEL_2, "settings": new.settings, "old_stopped_s": 10.8}))
    tally.add_records([_record(12.0 + i / 4, 2, steps=5, accepted=2) for i in range(4)])
    tally.add_samples([_sample(13.0, 0.6, 20.0, 8.0), _sample(14.0, 0.8, 0.0, 0.0)])
    return tally, running


def test_a_relaunched_variant_has_one_memory_row_per_epoch_with_that_epoch_s_server_and_usage() -> None:
    tally, running = _two_epochs()
    rows = tally.memory_rows(running)
    assert [(r["variant"], r["epoch"], r["label"]) for r in rows] == [("baseline", 1, "baseline"), ("k4", 1, "k4"),
                                                                      ("k4", 2, LABEL_2)]
    _, one, two = rows
    assert (one["kv_cache_tokens"], one["max_concurrency"]) == (300_000, 75.0)
    assert (two["kv_cache_tokens"], two["max_concurrency"]) == (200_000, 50.0)
    assert one["kv_usage_mean"] == pytest.approx(0.3) and one["kv_usage_peak"] == 0.4
    assert two["kv_usage_mean"] == pytest.approx(0.7) and two["kv_usage_peak"] == 0.8
    assert (one["kv_cache_tokens_vs_baseline"], two["kv_cache_tokens_vs_baseline"]) == (0.75, 0.5)
    assert not one["baseline"] and rows[0]["baseline"] and rows[0]["kv_usage_peak"] == 0.5


def test_a_relaunched_variant_is_cross_checked_per_epoch_with_its_own_sums() -> None:
    tally, _ = _two_epochs()
    checks = {(c.variant, c.epoch, c.check.quantity): c for c in tally.crosscheck_epochs()}
    assert {(v, e) for v, e, _ in checks} == {("k4", 1), ("k4", 2)}  # the baseline saw no speculation
    one, two = checks[("k4", 1, "drafts")], checks[("k4", 2, "drafts")]
    assert (one.check.client, one.check.server, two.check.client, two.check.server) == (30.0, 30.0, 24.0, 24.0)
    assert checks[("k4", 1, "accepted")].check.server == 18.0 and checks[("k4", 2, "accepted")].check.server == 10.0
    assert all(c.check.ok for c in checks.values())
    assert (one.label, two.label) == ("k4", LABEL_2) and two.check.message.startswith(f"{LABEL_2}: drafts")


def test_the_report_s_memory_and_crosscheck_rows_carry_their_epoch() -> None:
    tally, running = _two_epochs()
    session = SimpleNamespace(tally=tally, servers_running=running, engine_label="sim", gpu_peak={},
                              time_scale=TimeScale(), drift=DriftJudge())
    extra = report_extra(session, ExitCode.OK, "ok")  # type: ignore[arg-type]
    assert [(r["variant"], r["epoch"], r["label"], r["kv_cache_tokens"]) for r in extra["memory"]] == [
        ("baseline", 1, "baseline", 400_000), ("k4", 1, "k4", 300_000), ("k4", 2, LABEL_2, 200_000)]
    drafts = [(r["variant"], r["epoch"], r["label"], r["client"], r["server"])
              for r in extra["crosscheck"] if r["quantity"] == "drafts"]
    assert drafts == [("k4", 1, "k4", 30.0, 30.0), ("k4", 2, LABEL_2, 24.0, 24.0)]
    assert extra["crosscheck_ok"] is True


def test_a_retried_relaunch_keeps_the_ending_epoch_s_server_and_an_unfinished_one_reports_it() -> None:
    book = EpochBook()
    tally = RunTally(book=book)
    old, failed = Server("k4", MemoryInfo(kv_cache_tokens=300_000)), Server("k4", MemoryInfo(kv_cache_tokens=1))
    running = {"k4": old}
    for e in (Event(t=5.0, kind=TRANSITION_EVENT, variant="k4", message=""), Event(t=9.0, kind=TRANSITION_EVENT, variant="k4", message="")):
        tally.add_event(e, running)
        book.on_event(e)
        running["k4"] = failed  # the relaunch started a server that never answered
    (row,) = tally.memory_rows(running)
    assert (row["epoch"], row["kv_cache_tokens"]) == (1, 300_000)


def test_a_tally_without_a_book_keeps_records_of_two_epochs_apart() -> None:
    tally = RunTally()
    tally.add_records([_record(0.0, 1, steps=10, accepted=6), _record(1.0, 2, steps=5, accepted=2)])
    checks = [(c.epoch, c.label, c.check.client) for c in tally.crosscheck_epochs() if c.check.quantity == "drafts"]
    assert checks == [(1, "k4", 10.0), (2, "k4·2", 5.0)]


def test_epoch_memory_table_compares_with_the_baseline_epoch_running_when_the_epoch_began() -> None:
    def em(variant: str, epoch: int, start: float, tokens: int, baseline: bool = False) -> EpochMemory:
        return EpochMemory(variant, epoch, f"{variant}·{epoch}", start, baseline, MemoryInfo(kv_cache_tokens=tokens),
                           KvUsage(1, 0.5, 0.5))

    rows = epoch_memory_table([em("baseline", 1, 0.0, 100, True), em("baseline", 2, 30.0, 200, True),
                               em("k4", 1, 0.0, 50), em("k4", 2, 40.0, 50)])
    assert [r["kv_cache_tokens_vs_baseline"] for r in rows] == [1.0, 1.0, 0.5, 0.25]
    assert list(rows[0])[:4] == ["variant", "epoch", "label", "baseline"]
    # accept's table (one configuration per server) keeps its shape: no epoch fields.
    (plain,) = memory_table([Server("k4", MemoryInfo(kv_cache_tokens=5))])
    assert "epoch" not in plain and plain["kv_cache_tokens"] == 5 and plain["kv_usage_mean"] is None


def test_each_server_s_counters_meet_the_requests_it_served_across_a_relaunch() -> None:
    """On one port the old server serves after its last read until it stops (in neither epoch: its
    counters were never read again), and the new one serves what waited for it before its epoch
    began (the new epoch's, on both sides)."""
    book = EpochBook()
    tally = RunTally(book=book)
    running = {"k4": Server("k4", MemoryInfo(17.0, 300_000, 75.0, 4096))}
    book.launch("k4", {})

    def event(e: Event) -> None:
        tally.add_event(e, running)
        book.on_event(e)

    tally.add_samples([_sample(9.5, 0.5, 3.0, 1.0)])  # a read before the transition: epoch 1's
    event(Event(t=10.0, kind=TRANSITION_EVENT, variant="k4", message="", data={"from_epoch": 1, "to_epoch": 2}))
    tally.add_records([_record(9.0, 1, steps=3, accepted=1, done=9.4)])  # finished in epoch 1, heard of late
    tally.add_samples([_sample(10.1, 0.5, 2.0, 2.0)])  # the old server's last read: epoch 1's
    tally.add_records([_record(9.9, 1, steps=2, accepted=2, done=10.05)])  # in that read, though in the transition
    tally.add_records([_record(9.8, 1, steps=6, accepted=3, done=10.4)])  # old server, after its last read
    tally.add_records([_record(10.9, 1, steps=7, accepted=5, done=11.5)])  # waited for the new server
    tally.add_samples([_sample(11.9, 0.0, 7.0, 5.0)])  # the new server before its epoch: that request
    event(Event(t=12.0, kind=RELAUNCH_EVENT, variant="k4", message="",
                data={"epoch": 2, "label": LABEL_2, "old_stopped_s": 10.6}))
    tally.add_records([_record(12.1, 2, steps=4, accepted=2, done=12.6)])
    tally.add_samples([_sample(13.0, 0.6, 4.0, 2.0)])
    drafts = {c.epoch: (c.check.client, c.check.server) for c in tally.crosscheck_epochs()
              if c.check.quantity == "drafts"}
    assert drafts == {1: (5.0, 5.0), 2: (11.0, 11.0)}
