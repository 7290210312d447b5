from __future__ import annotations

from speclab.metrics.crosscheck import SpecTotals, compare, crosscheck, mismatches
from speclab.model.records import RequestRecord, ServerSample, SpecCounts


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
