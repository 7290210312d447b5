"""Timeline, play state and speed of a replay (see ``speclab.ui.replay``)."""

from __future__ import annotations

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.ui.replay import ReplayControls


def render_replay(replay: ReplayControls, width: int) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    state = "▶ playing" if replay.playing else "⏸ paused"
    head = f" {state}  {replay.position:6.1f} / {replay.duration:.1f} s  ×{replay.speed:g}  "
    out.append(head, style="bold")
    bar_w = max(4, width - len(head) - 1)
    done = round(bar_w * (replay.position / replay.duration if replay.duration else 0.0))
    out.append("━" * done, style="cyan")
    out.append("─" * (bar_w - done), style="dim")
    return out


class ReplayBar(Widget):
    DEFAULT_CSS = """
    ReplayBar { height: 1; background: $panel; }  /* in the flow, above the docked footer */
    """

    def __init__(self, replay: ReplayControls, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay

    def render(self) -> RenderResult:
        return render_replay(self.replay, self.content_size.width)
