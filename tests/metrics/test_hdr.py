from __future__ import annotations

import random

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from speclab.metrics.hdr import LatencyHistogram, merge_all, merged_percentiles
from speclab.model.names import HIST_HIGHEST_US, PERCENTILE_POINTS


def _filled(seed: int, n: int, mu: float = 9.0, sigma: float = 1.5) -> tuple[LatencyHistogram, HdrHistogram]:
    rng = random.Random(seed)
    ours, ref = LatencyHistogram(), HdrHistogram(1, HIST_HIGHEST_US, 3)
    for _ in range(n):
        value = min(int(rng.lognormvariate(mu, sigma)), HIST_HIGHEST_US)
        ours.record_us(value)
        ref.record_value(value)
    return ours, ref


@pytest.mark.parametrize(("n", "sigma"), [(1, 1.0), (2, 1.0), (7, 3.0), (500, 1.5), (5000, 3.0)])
def test_one_pass_percentiles_equal_library(n: int, sigma: float) -> None:
    ours, ref = _filled(n, n, sigma=sigma)
    assert np.array_equal(np.ctypeslib.as_array(ref.counts), ours.counts())
    result = ours.percentiles()
    assert result.count == n
    assert list(result.values) == [ref.get_value_at_percentile(p) for p in PERCENTILE_POINTS]
    assert result.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)
    assert ours.mean == pytest.approx(ref.get_mean_value(), rel=1e-12)


def test_empty_histogram_has_no_values() -> None:
    result = LatencyHistogram().percentiles()
    assert result.count == 0 and result.values == () and result.p99 is None


def test_record_clamps_into_range() -> None:
    h = LatencyHistogram()
    h.record_us(-5)
    h.record_s(10_000.0)  # beyond one hour
    assert h.count == 2
    assert h.percentiles().values[0] == 0
    assert h.max_us >= HIST_HIGHEST_US


def test_record_s_is_microseconds() -> None:
    h = LatencyHistogram()
    h.record_s(0.250)
    assert h.value_at_percentile(50.0) == h.percentiles().p50
    assert 249_000 <= (h.percentiles().p50 or 0) <= 251_000


def test_encode_decode_roundtrip() -> None:
    ours, _ = _filled(3, 2000)
    decoded = LatencyHistogram.decode(ours.encode())
    assert decoded.count == ours.count
    assert np.array_equal(decoded.counts(), ours.counts())
    assert decoded.percentiles() == ours.percentiles()


def test_merge_equals_recording_everything_in_one() -> None:
    parts = [_filled(seed, 300, mu=8 + seed)[0] for seed in range(4)]
    everything = LatencyHistogram()
    for seed in range(4):
        rng = random.Random(seed)
        for _ in range(300):
            everything.record_us(min(int(rng.lognormvariate(8 + seed, 1.5)), HIST_HIGHEST_US))
    merged = merge_all(parts)
    assert np.array_equal(merged.counts(), everything.counts())
    assert merged.percentiles() == everything.percentiles()
    assert merged_percentiles(parts) == everything.percentiles()
    via_decode = LatencyHistogram()
    for part in parts:
        via_decode.merge(LatencyHistogram.decode(part.encode()))
    assert via_decode.percentiles() == everything.percentiles()


def test_copy_is_independent_and_clear_empties() -> None:
    ours, _ = _filled(5, 100)
    clone = ours.copy()
    ours.clear()
    assert ours.count == 0 and ours.percentiles().count == 0
    assert clone.count == 100
    ours.record_us(1000)
    assert ours.percentiles().values[-1] == ours.value_at_percentile(100.0)


def test_a_dropped_histogram_frees_its_counts_without_the_cycle_collector() -> None:
    """hdrh's histogram and encoder refer to each other; speclab's wrapper breaks that cycle, so a
    busy aggregator's discarded histograms (188 KB each) do not pile up between full collections."""
    import gc
    import weakref

    recorded = LatencyHistogram()
    recorded.record_us(1500)
    decoded = LatencyHistogram.decode(recorded.encode())
    decoded.merge(recorded)
    assert decoded.count == 2 and decoded.percentiles().values[0] == recorded.percentiles().values[0]
    refs = [weakref.ref(recorded.raw), weakref.ref(decoded.raw)]
    gc.disable()
    try:
        del recorded, decoded
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()
