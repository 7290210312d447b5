"""The two status lines: what is running, where the numbers come from, and what is selected."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.snapshot import Snapshot
from speclab.session.api import ServerView, SessionInfo

# A server that was launched and is not serving: said on the status line while the run is live.
DOWN_STATUSES = ("exited", "stopped")
# Downtime the session chose: the server is (re)starting, which the Servers tab and the A/B title say.
PLANNED_STATUSES = ("starting", "relaunching")


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
    servers: Mapping[str, ServerView] = field(default_factory=dict)  # the source's views, set on refresh


def servers_down(s: StatusLine) -> list[str]:
    """``k4 server exited`` for each variant whose server is not serving while the run is live: its
    session view says so (exited, or stopped before the run ended), or else its latest /metrics
    scrape found it down; a server being started or relaunched is not news here."""
    snap = s.snapshot
    if snap is None:
        return []
    live = not (snap.finished or s.ended or s.info.replay)
    out: list[str] = []
    for variant in s.info.variants:
        view = s.servers.get(variant)
        status = view.status if view is not None else ""
        sample = snap.servers.get(variant)
        if status.startswith("exited") or (live and status in DOWN_STATUSES):
            out.append(f"{variant} server {status}")
        elif sample is not None and not sample.up and not snap.finished and status not in PLANNED_STATUSES:
            out.append(f"{variant} server down")
    return out


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
    down = servers_down(s)
    if down:
        out.append(" " + ", ".join(down) + " ", style="bold white on red")
        out.append(" ")
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
