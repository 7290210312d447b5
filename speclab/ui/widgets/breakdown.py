"""Where the time goes, per prompt class: schedule lag, server queue, prefill and decode as one bar.

Each bar is one class's time split 100% across the parts (classes differ by orders of magnitude,
so shares are what compare); the total is printed beside it. The parts are each component's own
p50 (or mean), so the total is their sum, not a measured percentile; the label says which
statistic it is and where the server timings came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.names import Metric
from speclab.model.snapshot import ClassStats
from speclab.ui import fmt

PARTS: tuple[tuple[Metric, str, str], ...] = (
    (Metric.SCHEDULE_LAG, "schedule lag", "yellow"),
    (Metric.SERVER_QUEUE, "server queue", "red"),
    (Metric.SERVER_PREFILL, "prefill", "dodger_blue2"),
    (Metric.SERVER_DECODE, "decode", "green3"),
)


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    name: str
    parts: tuple[float | None, ...]  # aligned with PARTS, µs

    @property
    def total(self) -> float:
        return sum(p for p in self.parts if p is not None)


def breakdown_row(name: str, stats: ClassStats, stat: str) -> BreakdownRow:
    values: list[float | None] = []
    for metric, _, _ in PARTS:
        pct = stats.latency.get(metric.value)
        if pct is None or not pct.count:
            values.append(None)
        else:
            values.append(pct.mean if stat == "mean" else pct.p50)
    return BreakdownRow(name, tuple(values))


def render_breakdown(rows: list[BreakdownRow], width: int) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, (_, label, color) in enumerate(PARTS):
        out.append("■ ", style=color)
        out.append(label + ("   " if i < len(PARTS) - 1 else ""))
    if not rows or all(r.total == 0 for r in rows):
        out.append("\nno requests yet", style="dim")
        return out
    name_w = min(18, max(len(r.name) for r in rows) + 1)
    value_w = 9
    bar_w = max(4, width - name_w - value_w - 1)
    for row in rows:
        out.append("\n" + row.name[: name_w - 1].ljust(name_w))
        used = 0
        length = bar_w if row.total else 0
        acc = 0.0
        for value, (_, _, color) in zip(row.parts, PARTS, strict=True):
            if value is None:
                continue
            acc += value
            end = round(acc / row.total * length) if row.total else 0
            cells = max(end - used, 1 if value > 0 and end - used == 0 and used < length else 0)
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
