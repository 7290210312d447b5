"""The spectrum's numbers line: every variant's number is shown whole, whatever the width.

Labels are shortened first (the settings suffix of a relaunched epoch dropped, then cut with an
ellipsis), values rounded (``42.0ms`` -> ``42ms``); a number's digits and unit are never cut.
"""

from __future__ import annotations

import re

import pytest

from speclab.model.names import PERCENTILE_POINTS
from speclab.ui import fmt
from speclab.ui.widgets.spectrum import Curve, Layout, numbers_line, render_spectrum

P99 = PERCENTILE_POINTS.index(99.0)


def values(p99_us: int) -> tuple[int, ...]:
    out = [round(p99_us * (0.3 + 0.6 * i / P99)) for i in range(P99)]
    out.append(p99_us)
    out += [p99_us + 1_500 * (i + 1) for i in range(len(PERCENTILE_POINTS) - P99 - 1)]
    return tuple(out)


# A relaunched epoch's long label, a value with a decimal, and one in seconds.
CURVES = [
    Curve("baseline", values(113_400), "white"),
    Curve("k2", values(1_234_000), "cyan"),
    Curve("k4·2 (k=6)", values(42_040), "green", emphasis=True),
]


def whole(value: int, line: str) -> bool:
    """``value`` in ``line`` as a whole word, in either of its forms."""
    return any(re.search(rf"(^|\s){re.escape(text)}(\s|$)", line) for text in (fmt.us(value, ""), fmt.us_short(value)))


@pytest.mark.parametrize("width", [36, 60, 120])
@pytest.mark.parametrize("layout", ["overlay", "split"])
def test_every_variant_number_is_shown_whole(layout: Layout, width: int) -> None:
    line = numbers_line(CURVES, layout, width).plain
    assert len(line) <= width
    for curve in CURVES:
        assert whole(curve.values[P99], line), (layout, width, line)
    assert line == render_spectrum(CURVES, width, 12, layout).plain.split("\n")[0].rstrip()


@pytest.mark.parametrize("width", [36, 60])
def test_the_selected_variant_alone_shows_whole_numbers(width: int) -> None:
    line = numbers_line(CURVES, "single", width).plain
    assert len(line) <= width and line.startswith("p50 ")
    selected = CURVES[2].values
    shown = [p for p in (50.0, 99.0, 99.9, 100.0) if f"{fmt.percentile_label(p)} " in line]
    assert shown[:3] == [50.0, 99.0, 99.9], line
    for p in shown:
        assert whole(selected[PERCENTILE_POINTS.index(p)], line), line


def test_labels_shorten_before_numbers_and_keep_them_whole() -> None:
    wide = numbers_line(CURVES, "overlay", 120).plain
    assert wide == "p99 baseline 113ms k2 1.23s k4·2 (k=6) 42.0ms"
    assert numbers_line(CURVES, "overlay", 44).plain == "p99 baseline 113ms k2 1.23s k4·2 42.0ms", "suffix goes first"
    assert numbers_line(CURVES, "overlay", 36).plain == "p99 baseline 113ms k2 1.2s k4·2 42ms"
    assert numbers_line(CURVES, "overlay", 20).plain == "p99 113ms 1.2s 42ms", "the colours name the variants"
    assert numbers_line(CURVES, "overlay", 16).plain == "113ms 1.2s 42ms"
    split = numbers_line(CURVES, "split", 60).plain
    assert "baseline 113ms" in split and "k2 1.23s" in split and "k4·2 42.0ms" in split


def test_short_latencies_round_without_cutting() -> None:
    assert [fmt.us_short(v) for v in (850, 999.6, 4_240, 9_960, 42_040, 999_400, 999_600, 1_234_000, 12_500_000)] == [
        "850µs", "1.0ms", "4.2ms", "10ms", "42ms", "999ms", "1.0s", "1.2s", "12s",
    ]
