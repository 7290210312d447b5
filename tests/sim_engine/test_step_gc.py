"""The engine process's collector: off inside a step, run between steps, cycles still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from speclab.sim.step_gc import StepCollector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def collector() -> Iterator[StepCollector]:
    c = StepCollector(young_allocations=200, full_every=3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_start_turns_automatic_collection_off_and_stop_turns_it_back_on() -> None:
    c = StepCollector()
    c.start()
    try:
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        c.stop()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_cycle_made_inside_a_step_outlives_the_step_until_the_collector_runs(collector: StepCollector) -> None:
    gone = _cycle()
    kept = [[i] for i in range(5000)]  # far past CPython's own threshold: nothing collects automatically
    assert gone() is not None
    collector.after_step()  # over young_allocations (net, as CPython counts): a young collection
    assert collector.young == 1
    assert gone() is None
    assert len(kept) == 5000


def test_few_allocations_leave_the_step_alone_and_every_full_every_th_step_collects_everything(
        collector: StepCollector) -> None:
    gc.collect()  # start from a young generation under the threshold
    gone = _cycle()
    collector.after_step()
    collector.after_step()
    assert (collector.young, collector.full) == (0, 0)
    assert gone() is not None
    collector.after_step()  # the third: full_every
    assert collector.full == 1
    assert gone() is None


def test_a_failed_step_is_followed_by_a_full_collection(collector: StepCollector) -> None:
    gc.collect()
    gone = _cycle()
    collector.after_step(failed=True)
    assert collector.full == 1
    assert gone() is None
