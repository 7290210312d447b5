"""A/B: the selected variant's current config against its previous one and against the baseline.

Each config window carries the baseline's numbers over exactly the same intervals, so "vs
baseline" compares like with like. Previous and current ran at different times (possibly under a
different offered load), which is why each has its own baseline column. The rows are for the
selected prompt class (or all classes): a draft length that helps one class can hurt another.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.widgets import DataTable

from speclab.model.snapshot import ALL_CLASSES
from speclab.ui import fmt
from speclab.ui.state import ConfigWindow, Totals

COLUMNS = (
    ("metric", "metric"),
    ("prev", "previous"),
    ("prev_base", "baseline (same s)"),
    ("cur", "current"),
    ("cur_base", "baseline (same s)"),
    ("vs_prev", "cur vs prev"),
    ("vs_base", "cur vs base"),
)

Getter = Callable[[Totals], float | None]


def rows(corrected: bool) -> tuple[tuple[str, str, Getter, Callable[[float | None], str]], ...]:
    label = "corrected" if corrected else "uncorrected"
    return (
        ("requests", "requests", lambda t: float(t.requests), lambda v: fmt.num(v, 0)),
        ("rps", "requests/s", lambda t: t.requests_per_s, lambda v: fmt.num(v, 2)),
        ("tps", "output tokens/s", lambda t: t.tokens_per_s, lambda v: fmt.num(v, 0)),
        ("len", "acceptance length", lambda t: t.acceptance_length, fmt.num),
        ("rej", "rejection rate", lambda t: t.rejection_rate, fmt.pct),
        ("json", "JSON failure rate", lambda t: t.structured_failure_rate, fmt.pct),
        ("e2e_mean", f"e2e mean ({label})", lambda t: t.e2e_mean_us(corrected), fmt.us),
        ("e2e_p99", f"e2e worst 1 s p99 ({label})", lambda t: _f(t.e2e_worst_p99(corrected)), fmt.us),
        ("errors", "errors", lambda t: float(t.errors), lambda v: fmt.num(v, 0)),
    )


def _f(v: int | None) -> float | None:
    return None if v is None else float(v)


def ab_cells(
    previous: ConfigWindow | None,
    current: ConfigWindow | None,
    corrected: bool,
    prompt_class: str = ALL_CLASSES,
) -> dict[str, tuple[str, ...]]:
    prev_own, prev_base_t = previous.totals(prompt_class) if previous else (None, None)
    cur_own, cur_base_t = current.totals(prompt_class) if current else (None, None)
    out: dict[str, tuple[str, ...]] = {}
    for key, label, get, show in rows(corrected):
        prev = get(prev_own) if prev_own is not None else None
        prev_base = get(prev_base_t) if prev_base_t is not None else None
        cur = get(cur_own) if cur_own is not None else None
        cur_base = get(cur_base_t) if cur_base_t is not None else None
        out[key] = (
            label,
            show(prev),
            show(prev_base),
            show(cur),
            show(cur_base),
            fmt.signed_pct_change(cur, prev),
            fmt.signed_pct_change(cur, cur_base),
        )
    return out


class ABTable(DataTable[str]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._cache: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(
        self,
        previous: ConfigWindow | None,
        current: ConfigWindow | None,
        corrected: bool,
        prompt_class: str = ALL_CLASSES,
    ) -> None:
        for key, cells in ab_cells(previous, current, corrected, prompt_class).items():
            if key not in self._cache:
                self.add_row(*cells, key=key)
            elif cells != self._cache[key]:
                for (col, _), value, old in zip(COLUMNS, cells, self._cache[key], strict=True):
                    if value != old:
                        self.update_cell(key, col, value, update_width=True)
            self._cache[key] = cells

    def cell_text(self, row: str, column: str) -> str:
        return self._cache[row][[k for k, _ in COLUMNS].index(column)]
