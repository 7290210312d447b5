from __future__ import annotations

from speclab.metrics.crosscheck import SpecTotals, compare, crosscheck, mismatches
from speclab.model.records import RequestRecord, ServerSample, SpecCounts
from speclab.servers.memory import KvUsage


def _record(variant: str, hist: list[int], source: str = "exact") -> RequestRecord:
    steps = sum(hist)
    k = len(hist) - 1
    accepted = sum(j * n for j, n in enumerate(hist))
    r = RequestRecord(request_id="x", variant=variant, prompt_class="qa", intended=0.0, sent=0.0, done=1.0)
    r.spec = SpecCounts(steps=steps, drafted=steps * k, accepted=accepted, histogram=hist, num_spec_tokens=k, source=source)
    return r


RECORDS = [_record("k3", [1, 2, 0, 3]), _record("k3", [0, 1, 1, 2]), _record("base", [])]


def test_client_totals_from_histograms() -> None:
    totals = SpecTotals.from_records(RECORDS)
    assert totals.drafts == 10 and totals.draft_tokens == 30 and totals.accepted == 20
    assert totals.per_position == (9.0, 6.0, 5.0)
    assert sum(totals.per_position) == totals.accepted
    estimated = SpecTotals.from_records([_record("k3", [0, 0, 4], source="estimated")])
    assert estimated.empty


def test_matching_counters_pass_across_several_samples() -> None:
    samples = [
        ServerSample(t=1, variant="k3", spec_drafts=6, spec_draft_tokens=18, spec_accepted=12, spec_accepted_per_pos=[5, 4, 3]),
        ServerSample(t=2, variant="k3", up=False),
        ServerSample(t=3, variant="k3", spec_drafts=4, spec_draft_tokens=12, spec_accepted=8, spec_accepted_per_pos=[4, 2, 2]),
        ServerSample(t=3, variant="base"),
    ]
    result = crosscheck(RECORDS, samples)
    assert {c.variant for c in result} == {"k3"}  # the baseline saw no speculation on either side
    assert [c.quantity for c in result] == ["drafts", "draft_tokens", "accepted", "accepted_pos_0", "accepted_pos_1", "accepted_pos_2"]
    assert mismatches(result) == []


def test_mismatch_is_reported_with_relative_error() -> None:
    server = SpecTotals(drafts=10, draft_tokens=30, accepted=26, per_position=(9, 6, 11))
    result = compare("k3", SpecTotals.from_records(RECORDS), server, tolerance=0.05)
    bad = mismatches(result)
    assert [c.quantity for c in bad] == ["accepted", "accepted_pos_2"]
    assert bad[0].relative_error == 6 / 26
    assert "accepted per-request sum 20 vs server counter 26" in bad[0].message
    near = compare("k3", SpecTotals(10, 30, 20.3, (9, 6, 5)), SpecTotals(10, 30, 20, (9, 6, 5)), tolerance=0.02)
    assert all(c.ok for c in near)


def test_server_without_client_counts_is_a_mismatch() -> None:
    result = crosscheck([], [ServerSample(t=1, variant="k3", spec_drafts=5, spec_draft_tokens=15, spec_accepted=3)])
    assert {c.quantity for c in mismatches(result)} == {"drafts", "draft_tokens", "accepted"}


def test_the_run_tally_gives_what_crosscheck_gives_over_the_same_stream() -> None:
    """``speclab run`` keeps sums, not records: same comparisons, same verdict inputs."""
    from speclab.metrics.run_tally import RunTally

    records = [
        RequestRecord(request_id=f"r{i}", variant="k2" if i % 3 else "base", prompt_class="qa", intended=0.1 * i,
                      warmup=i < 2, error_kind="http_5xx" if i == 7 else None, error_message="boom" if i == 7 else None,
                      spec=SpecCounts(steps=4, drafted=8, accepted=5 + i % 2, histogram=[0, 3 - i % 2, 1 + i % 2],
                                      num_spec_tokens=2, source="exact" if i % 4 else "estimated"))
        for i in range(12)
    ]
    samples = [ServerSample(t=float(i), variant="k2", spec_drafts=9.0, spec_draft_tokens=18.0, spec_accepted=11.0,
                            spec_accepted_per_pos=[7.0, 4.0], kv_usage=0.1 * i, up=i != 2) for i in range(4)]
    tally = RunTally()
    for i in range(0, 12, 5):
        tally.add_records(records[i:i + 5])
    tally.add_samples(samples)
    assert tally.crosscheck() == crosscheck(records, samples)
    assert (tally.measured, tally.measured_failed, tally.error_kinds, tally.first_error) == (10, 1, {"http_5xx"}, "boom")
    assert not tally.all_failed and tally.kv_usage == {("k2", 1): KvUsage(3, 0.0 + 0.1 + 0.30000000000000004, 0.30000000000000004)}
