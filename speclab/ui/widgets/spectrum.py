"""Percentile spectrum: latency against percentile on a log "nines" axis, as HdrHistogram plots it.

The x position of percentile p is -log10(1 - p/100), so 0, 90, 99, 99.9 and 99.99 are evenly
spaced and the tail gets as much room as the body; "max" sits one decade past 99.99. Curves are
drawn as steps with box characters; variants are overlaid in one panel or drawn side by side with a
shared y scale so their heights compare directly. The numbers line above the plot fits its width by
shortening labels and rounding values, never by cutting a number (``header_segments``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rich.style import Style
from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.names import PERCENTILE_POINTS
from speclab.ui import fmt

Layout = Literal["single", "overlay", "split"]
LAYOUTS: tuple[Layout, ...] = ("overlay", "split", "single")
LABEL_W = 8  # the y axis's labels and tick column


def nines(percentile: float) -> float:
    if percentile >= 100.0:
        return nines(99.99) + 1.0
    return -math.log10(1.0 - percentile / 100.0)


X_POINTS = tuple(nines(p) for p in PERCENTILE_POINTS)
X_MAX = X_POINTS[-1]
X_TICKS = ((0.0, "0"), (1.0, "90"), (2.0, "99"), (3.0, "99.9"), (4.0, "99.99"), (X_MAX, "max"))


@dataclass(frozen=True, slots=True)
class Curve:
    name: str
    values: tuple[int, ...]  # µs at PERCENTILE_POINTS
    color: str
    emphasis: bool = False


def value_at(values: tuple[int, ...], x: float) -> float:
    """Linear interpolation between the two percentile points around nines-position ``x``."""
    for i in range(1, len(X_POINTS)):
        if x <= X_POINTS[i]:
            x0, x1 = X_POINTS[i - 1], X_POINTS[i]
            f = (x - x0) / (x1 - x0) if x1 > x0 else 1.0
            return values[i - 1] + (values[i] - values[i - 1]) * f
    return float(values[-1])


def nice_ceiling(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10.0 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


Cell = tuple[str, Style | None]


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.cells: list[list[Cell]] = [[(" ", None)] * width for _ in range(height)]

    def put(self, x: int, y: int, char: str, style: Style | None) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.cells[y][x] = (char, style)

    def text(self, x: int, y: int, s: str, style: Style | None = None) -> None:
        for i, ch in enumerate(s):
            self.put(x + i, y, ch, style)

    def free(self, x: int, y: int, length: int) -> bool:
        return all(0 <= x + i < self.width and self.cells[y][x + i][0] == " " for i in range(length))

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        for r, row in enumerate(self.cells):
            for ch, style in row:
                out.append(ch, style)
            if r < self.height - 1:
                out.append("\n")
        return out


def _draw_curve(canvas: _Canvas, x0: int, width: int, rows: int, ymax: float, curve: Curve) -> None:
    style = Style(color=curve.color, bold=curve.emphasis)
    prev: int | None = None
    for c in range(width):
        x = X_MAX * c / max(1, width - 1)
        v = value_at(curve.values, x)
        r = round((1.0 - min(v / ymax, 1.0)) * (rows - 1))
        if prev is None or r == prev:
            canvas.put(x0 + c, r, "─", style)
        elif r < prev:
            canvas.put(x0 + c, prev, "╯", style)
            for y in range(r + 1, prev):
                canvas.put(x0 + c, y, "│", style)
            canvas.put(x0 + c, r, "╭", style)
        else:
            canvas.put(x0 + c, prev, "╮", style)
            for y in range(prev + 1, r):
                canvas.put(x0 + c, y, "│", style)
            canvas.put(x0 + c, r, "╰", style)
        prev = r


def _x_axis(canvas: _Canvas, x0: int, width: int, y: int, dim: Style) -> None:
    for c in range(width):
        canvas.put(x0 + c, y, "─", dim)
    for x, label in X_TICKS:
        c = round(x / X_MAX * (width - 1))
        start = min(max(0, c - len(label) // 2), width - len(label))
        if c == width - 1:
            start = width - len(label)
        lo, hi = max(0, start - 1), min(width, start + len(label) + 1)
        if start >= 0 and all(canvas.cells[y][x0 + i][0] == "─" for i in range(lo, hi)):
            canvas.text(x0 + start, y, label, dim)


def render_spectrum(curves: list[Curve], width: int, height: int, layout: Layout) -> Text:
    """The whole chart as text: a numbers line, the plot with a y axis, and the nines axis."""
    curves = _shown(curves, layout)
    if not curves:
        return Text("no requests yet", style="dim")
    label_w = LABEL_W
    rows = height - 2
    plot_w = width - label_w
    canvas = _Canvas(width, max(1, height))
    dim = Style(dim=True)
    for x, text, style in header_segments(curves, layout, width, label_w):
        canvas.text(x, 0, text, style)
    if rows < 2 or plot_w < 12:
        return canvas.render()
    ymax = nice_ceiling(max(max(c.values) for c in curves))
    for r, tick in ((0, ymax), (rows // 2, ymax / 2)):
        label = fmt.us(tick)
        canvas.text(0, 1 + r, (label if len(label) < label_w else fmt.us_short(tick)).rjust(label_w - 1), dim)
    canvas.text(0, rows, "0".rjust(label_w - 1), dim)
    for r in range(rows):
        canvas.put(label_w - 1, 1 + r, "┤" if r in (0, rows // 2, rows - 1) else "│", dim)
    canvas.put(label_w - 1, 1 + rows, "└", dim)
    if layout == "split" and len(curves) > 1:
        n = len(curves)
        panel = (plot_w - (n - 1)) // n
        for i, curve in enumerate(curves):
            x0 = label_w + i * (panel + 1)
            sub = _Canvas(panel, rows)
            _draw_curve(sub, 0, panel, rows, ymax, curve)
            _blit(canvas, sub, x0, 1)
            _x_axis(canvas, x0, panel, 1 + rows, dim)
    else:
        sub = _Canvas(plot_w, rows)
        for curve in sorted(curves, key=lambda c: c.emphasis):
            _draw_curve(sub, 0, plot_w, rows, ymax, curve)
        _blit(canvas, sub, label_w, 1)
        _x_axis(canvas, label_w, plot_w, 1 + rows, dim)
    return canvas.render()


def _blit(dst: _Canvas, src: _Canvas, x0: int, y0: int) -> None:
    for y, row in enumerate(src.cells):
        for x, (ch, style) in enumerate(row):
            if ch != " ":
                dst.put(x0 + x, y0 + y, ch, style)


Segment = tuple[int, str, Style]  # (column, text, style) of the numbers line


def short_label(name: str) -> str:
    """A variant's label without its settings suffix: ``k4·2 (k=6)`` -> ``k4·2``."""
    head, paren, _ = name.partition(" (")
    return head if paren and head else name


def _clip(name: str, width: int) -> str:
    """``name`` in at most ``width`` columns, an ellipsis marking a cut; empty below two columns."""
    if len(name) <= width:
        return name
    return name[: width - 1] + "…" if width >= 2 else ""


def _p99_texts(curve: Curve) -> tuple[str, str]:
    value = curve.values[PERCENTILE_POINTS.index(99.0)]
    return fmt.us(value, ""), fmt.us_short(value)


# How a label and its value are shortened, in order: (settings suffix dropped, value rounded,
# label cut to at most this many columns: None for whole, 0 for no label).
Shortening = tuple[bool, bool, int | None]


def _shortenings(longest: int) -> list[Shortening]:
    """Whole; without the settings suffix; value rounded; label cut to ``longest - 1`` .. 2 columns; no label."""
    return [(False, False, None), (True, False, None), (True, True, None),
            *((True, True, n) for n in range(longest - 1, 1, -1)), (True, True, 0)]


def _label_text(curve: Curve, how: Shortening) -> str:
    short, rounded, cap = how
    name = short_label(curve.name) if short else curve.name
    if cap is not None:
        name = _clip(name, cap)
    value = _p99_texts(curve)[1 if rounded else 0]
    return f"{name} {value}" if name else value


def _shown(curves: list[Curve], layout: Layout) -> list[Curve]:
    curves = [c for c in curves if len(c.values) == len(PERCENTILE_POINTS)]
    if layout == "single":
        curves = [c for c in curves if c.emphasis] or curves[:1]
    return curves


def header_segments(curves: list[Curve], layout: Layout, width: int, label_w: int = LABEL_W) -> list[Segment]:
    """The numbers line above the plot, fitted to ``width`` columns: labels are shortened (settings
    suffix dropped, then abbreviated, then left out) and values rounded (``42.0ms`` -> ``42ms``)
    before anything is left out, and a number is only ever shown whole, digits and unit."""
    curves = _shown(curves, layout)
    if not curves:
        return []
    if len(curves) == 1:
        return _single_segments(curves[0], width)
    if layout == "split":
        split = _split_segments(curves, width, label_w)
        if split is not None:
            return split
    return _flow_segments(curves, width)


def _single_segments(curve: Curve, width: int) -> list[Segment]:
    """``p50 … p99 … p99.9 … max …`` of one curve; values rounded, then spaces, then points from the right."""
    points = [(fmt.percentile_label(p), curve.values[PERCENTILE_POINTS.index(p)]) for p in (50.0, 99.0, 99.9, 100.0)]
    for keep in range(len(points), 0, -1):
        for value in (lambda v: fmt.us(v, ""), fmt.us_short):
            for sep in ("  ", " "):
                line = sep.join(f"{label} {value(v)}" for label, v in points[:keep])
                if len(line) <= width:
                    return [(0, line, Style(color=curve.color))]
    return []


def _split_segments(curves: list[Curve], width: int, label_w: int) -> list[Segment] | None:
    """One label over each panel, each fitted to its panel; None when a panel is too narrow for a value."""
    panel = (width - label_w - (len(curves) - 1)) // len(curves)
    out: list[Segment] = [(0, "p99"[: label_w - 1], Style(dim=True))] if label_w > 1 else []
    for i, curve in enumerate(curves):
        texts = (_label_text(curve, how) for how in _shortenings(len(short_label(curve.name))))
        fits = next((text for text in texts if len(text) <= panel), None)
        if fits is None:
            return None
        out.append((label_w + i * (panel + 1), fits, Style(color=curve.color, bold=curve.emphasis)))
    return out


def _flow_segments(curves: list[Curve], width: int) -> list[Segment]:
    """``p99`` then every variant's label and value in a row, all shortened alike until they fit; at
    the narrowest the metric's name goes, then whole variants from the right."""
    longest = max(len(short_label(c.name)) for c in curves)
    tries: list[tuple[Shortening, str, str]] = [(how, " ", "p99 ") for how in _shortenings(longest)]
    tries.append(((True, True, 0), " ", ""))
    for keep in range(len(curves), 0, -1):
        for how, sep, prefix in tries:
            texts = [_label_text(curve, how) for curve in curves[:keep]]
            if len(prefix) + len(sep.join(texts)) <= width:
                out: list[Segment] = [(0, prefix.rstrip(), Style(dim=True))] if prefix else []
                x = len(prefix)
                for curve, text in zip(curves, texts, strict=False):
                    out.append((x, text, Style(color=curve.color, bold=curve.emphasis)))
                    x += len(text) + len(sep)
                return out
    return []


def numbers_line(curves: list[Curve], layout: Layout, width: int, label_w: int = LABEL_W) -> Text:
    """The numbers line as one line of text of at most ``width`` columns."""
    canvas = _Canvas(max(0, width), 1)
    for x, text, style in header_segments(curves, layout, width, label_w):
        canvas.text(x, 0, text, style)
    line = canvas.render()
    line.rstrip()
    return line


class SpectrumChart(Widget):
    """One metric's spectrum; ``show`` swaps the data in place and repaints, nothing is remounted."""

    DEFAULT_CSS = """
    SpectrumChart { height: 1fr; min-height: 6; border: round $panel-lighten-2; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._curves: list[Curve] = []
        self._layout: Layout = "overlay"

    def show(self, title: str, subtitle: str, curves: list[Curve], layout: Layout) -> None:
        self.border_title = title
        self.border_subtitle = subtitle
        self._curves = curves
        self._layout = layout
        self.refresh()

    @property
    def curves(self) -> list[Curve]:
        return self._curves

    def render(self) -> RenderResult:
        return render_spectrum(self._curves, self.content_size.width, self.content_size.height, self._layout)
