"""The two status lines: what is running, where the numbers come from, and what is selected."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.snapshot import Snapshot
from speclab.session.api import SessionInfo


@dataclass(slots=True)
class StatusLine:
    info: SessionInfo
    snapshot: Snapshot | None = None
    variant: str = ""
    prompt_class: str = ""
    corrected: bool = True
    controls: str = "live"  # "live" or why controls are off
    error: str = ""
    ended: bool = False


def render_status(s: StatusLine, width: int = 0) -> Text:
    """Two lines, each cut to ``width`` (when given) so a narrow terminal never wraps them."""
    info = s.info
    out = Text()
    out.append(" speclab ", style="bold reverse")
    simulated = s.snapshot.simulated if s.snapshot else info.simulated
    if simulated:
        out.append(" SIMULATED ", style="bold black on yellow")
    if info.replay:
        out.append(" REPLAY ", style="bold black on cyan")
    if info.time_scale != 1.0:
        out.append(f" TIME SCALE {info.time_scale:g} ", style="bold black on magenta")
        out.append(" modelled time", style="dim")
    out.append(f" lab {info.lab} · scenario {info.scenario}")
    if info.arrival:
        out.append(" · " + " ".join(f"{k} {v}" for k, v in info.arrival.items()), style="dim")
    if info.pair:
        out.append(" · " + " / ".join(f"{k} {v}" for k, v in info.pair.items()), style="dim")
    out.append("\n")
    snap = s.snapshot
    if snap is None:
        out.append(" waiting for the first snapshot…", style="dim")
    else:
        out.append(f" t {snap.t:.1f} s ")
        if snap.finished or s.ended:
            out.append("■ finished", style="bold")
        elif snap.paused:
            out.append("⏸ PAUSED", style="bold black on yellow")
        else:
            out.append("▶ running", style="bold green3")
    out.append(" │ ")
    out.append(f"{s.variant} · {s.prompt_class}", style="bold cyan")
    out.append(" · " + ("corrected" if s.corrected else "uncorrected"), style="bold")
    out.append(" │ ")
    if s.error:
        out.append(f"{s.error} ", style="bold red")
    if snap is not None:
        health = snap.health
        if health.saturated:
            out.append(f" CLIENT SATURATED: {health.reason or 'numbers describe the client'} ", style="bold white on red")
        else:
            out.append(f"client ok, lag p99 {health.schedule_lag_p99_ms:.1f} ms, {health.in_flight} in flight", style="dim")
            if health.nodes:  # a Ray cluster's workers
                out.append(f", {health.workers} workers on {health.nodes} nodes, clock ±{health.clock_bound_ms:.1f} ms",
                           style="dim")
    if s.controls != "live":
        out.append(f" · controls off: {s.controls}", style="dim")
    if width <= 0:
        return out
    lines = out.split("\n")
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return Text("\n").join(lines)


class StatusBar(Widget):
    DEFAULT_CSS = """
    StatusBar { height: 2; background: $panel; }
    """

    def __init__(self, line: StatusLine, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.line = line

    def render(self) -> RenderResult:
        return render_status(self.line, self.content_size.width)
