"""Acceptance per prompt class for every variant, and the distribution of the selected one.

Rows are keyed ``variant/epoch/class`` and updated cell by cell, so a 4 Hz stream repaints only
what changed. A relaunched variant gets one block of rows per config epoch, labelled with what
changed (``k4·2 (k=6)``): histograms of different draft lengths are never added together. The
source column says whether counts came from per-request metrics (exact) or from tokens per
streamed chunk (estimated); per-position rates divide by the steps that drafted that position.
The distribution panel ends with the acceptance length per k the steps used, where the server
reported per-step counts (a k schedule uses several).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget
from textual.widgets import DataTable

from speclab.model.snapshot import ALL_CLASSES, AcceptanceStats, ClassStats, Snapshot, VariantStats
from speclab.ui import fmt

COLUMNS: tuple[tuple[str, str], ...] = (
    ("variant", "variant"),
    ("class", "class"),
    ("requests", "req"),
    ("length", "acc len"),
    ("dist", "len dist"),
    ("rejection", "reject"),
    ("verifications", "verif/req"),
    ("positions", "per-position"),
    ("structured", "JSON fail"),
    ("source", "source"),
)


def no_counts(stats: ClassStats) -> str:
    """Why a row has no acceptance counts: no request finished in it (a speculative variant whose
    server is down, a class not sent yet), or its requests drafted nothing (the baseline)."""
    return "no requests" if stats.requests == 0 else "no speculation"


def acceptance_cells(stats: ClassStats) -> tuple[str | Text, ...]:
    acc = stats.acceptance
    spec = bool(acc.steps)
    dist = Text(fmt.spark([float(n) for n in acc.histogram]), style="cyan") if spec else fmt.NO_DATA
    positions = " ".join(f"{p * 100:.0f}" for p in acc.per_position) if spec else fmt.NO_DATA
    structured = fmt.NO_DATA
    if stats.structured_total:
        structured = f"{fmt.pct(stats.structured_failure_rate)} ({stats.structured_failed}/{stats.structured_total})"
    source = acc.source if spec else no_counts(stats)
    return (
        str(stats.requests),
        fmt.num(acc.acceptance_length),
        dist,
        fmt.pct(acc.rejection_rate),
        fmt.num(acc.verifications_per_request, 1),
        positions,
        structured,
        Text(source, style="yellow" if source == "estimated" else ""),
    )


class AcceptanceTable(DataTable[str | Text]):
    """Every (variant, class) row, plus each variant's "all" row."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self._cache: dict[str, tuple[str | Text, ...]] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, snapshot: Snapshot, variants: tuple[str, ...], classes: tuple[str, ...]) -> None:
        for variant in variants:
            epochs = [e.stats for e in snapshot.epochs.get(variant, ())]
            if not epochs and variant in snapshot.cumulative:
                epochs = [snapshot.cumulative[variant]]
            for vstats in epochs:
                self._show_epoch(variant, vstats, classes)

    def _show_epoch(self, variant: str, vstats: VariantStats, classes: tuple[str, ...]) -> None:
        label = vstats.label or variant
        for cls in (*classes, ALL_CLASSES):
            stats = vstats.classes.get(cls)
            if stats is None:
                continue
            key = f"{variant}/{vstats.epoch}/{cls}"
            cells = acceptance_cells(stats)
            if key not in self._cache:
                self.add_row(label, cls, *cells, key=key)
            elif self._cache[key] != cells:
                for (col, _), value, old in zip(COLUMNS[2:], cells, self._cache[key], strict=True):
                    if value != old:
                        self.update_cell(key, col, value, update_width=True)
            self._cache[key] = cells


def render_distribution(name: str, acc: AcceptanceStats, width: int) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    if not acc.steps:
        out.append(f"{name}: no speculative steps (baseline or no data)", style="dim")
        return out
    out.append(f"{name}  ", style="bold")
    out.append(f"source {acc.source}", style="yellow" if acc.source == "estimated" else "")
    out.append(
        f" · acceptance length {fmt.num(acc.acceptance_length)} · rejection {fmt.pct(acc.rejection_rate)} · "
        f"{acc.steps} verify steps"
    )
    if acc.position_source == "estimated" and acc.source != "estimated":
        out.append(" · per position over estimated drafts (some steps drafted fewer than k)", style="yellow")
    out.append("\n")
    bar_w = max(4, width - 36)
    total = sum(acc.histogram) or 1
    half = max(4, bar_w // 2)
    out.append("accepted drafts per step", style="dim")
    out.append(" " * max(1, 3 + half + 10 - 24))
    out.append("P(position accepted)\n", style="dim")
    positions = acc.per_position
    for j, n in enumerate(acc.histogram):
        share = n / total
        out.append(f"{j:>2} ")
        out.append("█" * round(share * half), style="cyan")
        out.append(" " * (half - round(share * half)))
        out.append(f" {share * 100:5.1f}%   ")
        if j < len(positions):
            p = positions[j]
            out.append(f"pos {j + 1} ")
            out.append("█" * round(p * half), style="green3")
            out.append(f" {p * 100:.0f}%")
        out.append("\n")
    if acc.per_k:
        out.append("per k used  ", style="dim")
        out.append(" · ".join(f"k={k}: {fmt.num(length)} ({steps} steps)" for k, steps, length in acc.k_rows))
    out.rstrip()
    return out


class AcceptanceDetail(Widget):
    DEFAULT_CSS = """
    AcceptanceDetail { height: auto; border: round $panel-lighten-2; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._label = ""
        self._acc = AcceptanceStats()

    def show(self, name: str, acc: AcceptanceStats) -> None:
        rows_changed = len(acc.histogram) != len(self._acc.histogram) or bool(acc.per_k) != bool(self._acc.per_k)
        self._label, self._acc = name, acc
        self.border_title = f"acceptance distribution · {name}"
        self.refresh(layout=rows_changed)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return 2 + len(self._acc.histogram) + (1 if self._acc.per_k else 0) if self._acc.steps else 1

    def render(self) -> RenderResult:
        return render_distribution(self._label, self._acc, self.content_size.width)
