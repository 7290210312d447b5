"""The acceptance table's source column: a class without requests says so; "no speculation" is
left for rows whose requests drafted nothing (the baseline)."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text

from speclab.model.snapshot import ClassStats
from speclab.ui.widgets.acceptance import acceptance_cells
from tests.ui.fakes import class_stats


def source(stats: ClassStats) -> str:
    cell = acceptance_cells(stats)[-1]
    return cell.plain if isinstance(cell, Text) else cell


def test_a_speculative_class_with_no_requests_says_no_requests() -> None:
    # k4's server crashed: its refusal class has had no request finish (only errors)
    crashed = ClassStats(requests=0, errors={"connect": 7})
    assert source(crashed) == "no requests"
    assert acceptance_cells(crashed)[0] == "0"
    assert source(ClassStats()) == "no requests"


def test_no_speculation_is_for_requests_that_drafted_nothing() -> None:
    baseline = class_stats("baseline", "refusal", 12, 3.0)
    assert baseline.requests == 12 and not baseline.acceptance.steps
    assert source(baseline) == "no speculation"
    k4 = class_stats("k4", "refusal", 12, 3.0)
    assert source(k4) == k4.acceptance.source != "no speculation"
    assert source(replace(k4, requests=0, acceptance=replace(k4.acceptance, steps=0))) == "no requests"
