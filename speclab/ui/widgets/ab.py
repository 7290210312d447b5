"""A/B: the selected variant's current config epoch against its previous one and the baseline.

The windows come from the snapshot (``Snapshot.ab``), merged by the aggregator from closed
intervals: the current epoch beside the baseline over the same intervals, and the previous epoch
over as many intervals just before its relaunch beside the baseline over those. The transition
(restart downtime and its failures) is in neither, and percentiles are the window's own. Previous
and current ran at different times (possibly under a different offered load), which is why each
has its own baseline column. Rates change in points, times and throughput in percent.
"""

from __future__ import annotations

from textual.widgets import DataTable

from speclab.model.ab_rows import ABRow, ab_rows, change_text
from speclab.model.snapshot import ALL_CLASSES, ABView, ClassStats, VariantStats
from speclab.ui import fmt

COLUMNS = (
    ("metric", "metric"),
    ("prev", "previous"),
    ("prev_base", "baseline (same s)"),
    ("cur", "current"),
    ("cur_base", "baseline (same s)"),
    ("vs_prev", "cur vs prev"),
    ("vs_base", "cur vs base"),
)


def show_value(row: ABRow, value: float | None) -> str:
    if row.kind == "time":
        return fmt.us(value)
    if row.kind == "rate":
        return fmt.pct(value)
    if row.key == "tps":
        return fmt.num(value, 0)
    if row.kind == "count":
        return fmt.num(value, 0)
    return fmt.num(value)


def _class(stats: VariantStats | None, prompt_class: str) -> ClassStats | None:
    return None if stats is None else stats.classes.get(prompt_class)


def ab_cells(view: ABView | None, corrected: bool, prompt_class: str = ALL_CLASSES) -> dict[str, tuple[str, ...]]:
    prev_w = view.previous if view is not None else None
    cur_w = view.current if view is not None and view.current.intervals else None
    sides = (
        _class(prev_w.own, prompt_class) if prev_w and prev_w.intervals else None,
        _class(prev_w.baseline, prompt_class) if prev_w and prev_w.intervals else None,
        _class(cur_w.own, prompt_class) if cur_w else None,
        _class(cur_w.baseline, prompt_class) if cur_w else None,
    )
    out: dict[str, tuple[str, ...]] = {}
    for row in ab_rows(corrected):
        prev, prev_base, cur, cur_base = (row.value(s) if s is not None else None for s in sides)
        out[row.key] = (
            row.label,
            show_value(row, prev),
            show_value(row, prev_base),
            show_value(row, cur),
            show_value(row, cur_base),
            change_text(row.kind, cur, prev, fmt.NO_DATA),
            change_text(row.kind, cur, cur_base, fmt.NO_DATA),
        )
    return out


def ab_title(view: ABView | None, variant: str, scope: str) -> str:
    """Which epochs, over which seconds: labels only (``k4·2 (k=6)``), never a settings dict."""
    if view is None:
        return f"{variant}, {scope}: no A/B yet"
    cur, prev = view.current, view.previous
    stopped = ", relaunching" if view.relaunching else ""
    current = (f"current {cur.label} (t {cur.start_s:.0f}–{cur.end_s:.0f} s{stopped})" if cur.intervals
               else f"current {cur.label} (no whole interval yet{stopped})")
    if prev is None:
        previous = "no relaunch yet, so no previous config"
    elif prev.intervals:
        previous = f"previous {prev.label} (t {prev.start_s:.0f}–{prev.end_s:.0f} s)"
    else:
        previous = f"previous {prev.label} (no whole interval before its relaunch)"
    return f"{variant}, {scope}: {previous}  →  {current}"


class ABTable(DataTable[str]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._cache: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, view: ABView | None, corrected: bool, prompt_class: str = ALL_CLASSES) -> None:
        for key, cells in ab_cells(view, corrected, prompt_class).items():
            if key not in self._cache:
                self.add_row(*cells, key=key)
            elif cells != self._cache[key]:
                for (col, _), value, old in zip(COLUMNS, cells, self._cache[key], strict=True):
                    if value != old:
                        self.update_cell(key, col, value, update_width=True)
            self._cache[key] = cells

    def cell_text(self, row: str, column: str) -> str:
        return self._cache[row][[k for k, _ in COLUMNS].index(column)]
