"""Throughput, rejection rate and p99 over time, one column per closed 1 s interval.

Every block shares one interval axis and ends in a marker row: ``T`` a relaunch asked, ``R`` the
new config answering (a new epoch), ``C`` another config or control change, ``•`` any other
event, ``!`` an interval in which the client was saturated (its numbers describe the load generator, not the server). The legend lists the events
with their times, so a spike can be tied to its cause.
"""

from __future__ import annotations

from collections.abc import Callable, Reversible, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.records import Event
from speclab.ui import fmt
from speclab.ui.state import RELAUNCH_KIND, TRANSITION_KIND, IntervalPoint, LabState

NAME_W = 11
VALUE_W = 10
LEGEND_EVENTS = 6


@dataclass(frozen=True, slots=True)
class Series:
    title: str
    value: Callable[[IntervalPoint], float | None]
    show: Callable[[float | None], str]


def series_for(corrected: bool) -> tuple[Series, ...]:
    label = "corrected" if corrected else "uncorrected"
    return (
        Series("throughput · requests/s", lambda p: p.requests_per_s, lambda v: fmt.num(v, 1)),
        Series("throughput · output tokens/s", lambda p: p.tokens_per_s, lambda v: fmt.num(v, 0)),
        Series("rejection rate", lambda p: p.rejection_rate, fmt.pct),
        Series(
            f"e2e p99 ({label})",
            (lambda p: _f(p.e2e_corrected_p99_us)) if corrected else (lambda p: _f(p.e2e_p99_us)),
            fmt.us,
        ),
    )


def _f(v: int | None) -> float | None:
    return None if v is None else float(v)


def event_mark(event: Event) -> tuple[str, str]:
    if event.kind == RELAUNCH_KIND:
        return "R", "bold magenta"
    if event.kind == TRANSITION_KIND:
        return "T", "magenta"
    if event.kind in ("config_change", "rate", "concurrency", "pause", "resume"):
        return "C", "bold yellow"
    return "•", "bold white"


def render_timeseries(
    state: LabState, variants: Sequence[str], colors: dict[str, str], corrected: bool, width: int
) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    cols = max(8, width - NAME_W - VALUE_W)
    last = state.last_interval
    if last < 0:
        out.append("no closed intervals yet", style="dim")
        return out
    first = max(0, last - cols + 1)
    axis = range(first, last + 1)
    marks: dict[int, tuple[str, str]] = {}
    for interval, event in state.events:
        if interval not in marks or event_mark(event)[0] == "R":
            marks[interval] = event_mark(event)
    by_interval = {v: _recent(state.history.get(v, ()), first) for v in variants}
    for n, series in enumerate(series_for(corrected)):
        if n:
            out.append("\n")
        values = {v: [_value(by_interval[v].get(i), series) for i in axis] for v in variants}
        peak = max((x for vs in values.values() for x in vs if x is not None), default=None)
        out.append(series.title, style="bold")
        out.append(f"   peak {series.show(peak)}\n", style="dim")
        for v in variants:
            out.append(v[: NAME_W - 1].ljust(NAME_W), style=colors.get(v, ""))
            out.append(fmt.spark(values[v], peak).ljust(cols), style=colors.get(v, ""))
            latest = next((x for x in reversed(values[v]) if x is not None), None)
            out.append(series.show(latest).rjust(VALUE_W) + "\n")
        out.append("events".ljust(NAME_W), style="dim")
        for i in axis:
            if i in marks:
                out.append(marks[i][0], style=marks[i][1])
            elif i in state.saturated:
                out.append("!", style="bold red")
            else:
                out.append("·", style="dim")
    out.append("\n\n")
    out.append("T relaunch asked  R new config answering  C config/control change  • other event  "
               "! client saturated\n", style="dim")
    recent = list(state.events)[-LEGEND_EVENTS:]
    if not recent:
        out.append("no events yet", style="dim")
    for k, (interval, event) in enumerate(recent):
        symbol, style = event_mark(event)
        out.append(f"{symbol} ", style=style)
        out.append(f"t={event.t:.1f}s  interval {interval}  [{event.kind}] {event.message}")
        if k < len(recent) - 1:
            out.append("\n")
    return out


def _recent(points: Reversible[IntervalPoint], first: int) -> dict[int, IntervalPoint]:
    """Only the points on screen: a day of history must not make every repaint slower."""
    out: dict[int, IntervalPoint] = {}
    for point in reversed(points):
        if point.interval < first:
            break
        out[point.interval] = point
    return out


def _value(point: IntervalPoint | None, series: Series) -> float | None:
    return None if point is None else series.value(point)


class TimeSeries(Widget):
    DEFAULT_CSS = """
    TimeSeries { height: auto; padding: 0 1; }
    """

    def __init__(self, state: LabState, variant_colors: dict[str, str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = state
        self.variant_colors = variant_colors
        self.corrected = True

    def show(self, corrected: bool) -> None:
        self.corrected = corrected
        self.refresh(layout=True)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        variants = len(self.state.info.variants)
        events = min(LEGEND_EVENTS, max(1, len(self.state.events)))
        return 4 * (variants + 2) + 2 + events

    def render(self) -> RenderResult:
        return render_timeseries(
            self.state, self.state.info.variants, self.variant_colors, self.corrected, self.content_size.width
        )
