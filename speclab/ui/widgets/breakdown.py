"""Where the time goes, per prompt class: schedule lag, server queue, prefill, decode and the client
+ transport remainder, as one bar drawn to absolute time.

The parts are the mean composition of the same requests (``metrics/split.py``): those at the
class's corrected-e2e p50, or its tail (at or above the p99), so they add up to those requests'
corrected e2e, printed beside the bar. Every bar shares one time scale, so a longer bar is a slower
class and the slow part shows as a long segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.latency_metrics import BY_METRIC, SPLIT_METRICS, SPLIT_REMAINDER
from speclab.model.snapshot import ClassStats
from speclab.ui import fmt

COLORS = ("yellow", "red", "dodger_blue2", "green3", "grey50")
PARTS: tuple[tuple[str, str], ...] = tuple(zip(
    (*(BY_METRIC[m].label for m in SPLIT_METRICS), SPLIT_REMAINDER[1]), COLORS, strict=True))


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    name: str
    parts: tuple[float, ...]  # aligned with PARTS, µs; they add up to ``total``
    total: float  # the mean corrected e2e of the same requests
    requests: int = 0


def breakdown_row(name: str, stats: ClassStats, stat: str) -> BreakdownRow | None:
    split = stats.split_tail if stat == "tail" else stats.split_p50
    if split is None:
        return None
    return BreakdownRow(name, split.parts, split.e2e_corrected, split.requests)


def render_breakdown(rows: list[BreakdownRow], width: int) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, (label, color) in enumerate(PARTS):
        out.append("■ ", style=color)
        out.append(label + ("  " if i < len(PARTS) - 1 else ""))
    if not rows:
        out.append("\nno requests yet", style="dim")
        return out
    name_w = min(18, max(len(r.name) for r in rows) + 1)
    value_w = 10
    bar_w = max(4, width - name_w - value_w - 1)
    scale = max(r.total for r in rows) or 1.0
    for row in rows:
        out.append("\n" + row.name[: name_w - 1].ljust(name_w))
        used, acc = 0, 0.0
        length = round(row.total / scale * bar_w)
        for value, (_, color) in zip(row.parts, PARTS, strict=True):
            if value <= 0:
                continue
            acc += value
            end = min(length, round(acc / scale * bar_w))
            cells = max(end - used, 1 if end - used == 0 and used < length else 0)
            out.append("█" * cells, style=color)
            used += cells
        out.append(" " * max(0, bar_w - used + 1))
        out.append(fmt.us(row.total).rjust(value_w - 1))
    return out


class Breakdown(Widget):
    """Per-class stacked bars for the selected variant."""

    DEFAULT_CSS = """
    Breakdown { height: auto; min-height: 3; border: round $panel-lighten-2; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[BreakdownRow] = []

    def show(self, title: str, subtitle: str, rows: list[BreakdownRow]) -> None:
        self.border_title = title
        self.border_subtitle = subtitle
        self.rows = rows
        self.refresh(layout=True)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return 1 + max(1, len(self.rows))

    def render(self) -> RenderResult:
        return render_breakdown(self.rows, self.content_size.width)
