"""Acceptance per k used: from vLLM's per-step counts to the snapshot, the report and the app."""

from __future__ import annotations

from speclab.metrics.cells import Counts, class_stats
from speclab.model.acceptance import per_k_counts
from speclab.model.records import RequestRecord
from speclab.reports import class_dict
from speclab.servers.backends.vllm import exact_spec
from speclab.ui.widgets.acceptance import render_distribution


def record(drafted: list[int], accepted: list[int]) -> RequestRecord:
    hist = [0] * 5
    for a in accepted:
        hist[a] += 1
    sd = {"acceptance_histogram": hist, "num_spec_steps": len(drafted), "num_draft_tokens": sum(drafted),
          "num_accepted_draft_tokens": sum(accepted), "num_spec_tokens": 4,
          "per_step_drafted": drafted, "per_step_accepted": accepted}
    return RequestRecord(request_id="r", variant="k4", prompt_class="c", intended=0.0, sent=0.0, first_token=0.1,
                         last_token=0.5, done=0.5, output_tokens=20, spec=exact_spec(sd))


def test_per_step_counts_group_by_the_k_each_step_used() -> None:
    assert per_k_counts([4, 4, 1, 1, 1, 2], [3, 1, 1, 0, 1, 2]) == [[1, 3, 2], [2, 1, 2], [4, 2, 4]]
    assert per_k_counts([], []) == []
    assert exact_spec({"num_spec_steps": 2, "acceptance_histogram": [1, 1]}).per_k == []  # summary mode: unknown


def test_counts_merge_into_acceptance_per_k_and_reach_report_and_app() -> None:
    a, b = Counts(), Counts()
    a.add_record(record([4, 4, 1], [3, 1, 1]))
    b.add_record(record([1, 2, 2], [0, 2, 1]))
    a.merge(b)
    acc = a.acceptance()
    assert acc.per_k == ((1, 2, 1), (2, 2, 3), (4, 2, 4))
    assert acc.k_rows == ((1, 2, 1.5), (2, 2, 2.5), (4, 2, 3.0))
    block = class_dict(class_stats(a, {}, 1.0, "none"))["acceptance"]
    assert block["per_k"] == [{"k": 1, "steps": 2, "acceptance_length": 1.5},
                              {"k": 2, "steps": 2, "acceptance_length": 2.5},
                              {"k": 4, "steps": 2, "acceptance_length": 3.0}]
    text = render_distribution("k4/all", acc, 100).plain
    assert "per k used  k=1: 1.50 (2 steps) · k=2: 2.50 (2 steps) · k=4: 3.00 (2 steps)" in text
