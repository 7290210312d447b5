"""The server panel: status, exact command, live gauges and log tail per variant, and memory.

Static facts come from the source's ``ServerView``s (the session's own record, not a server
poll); running/waiting/KV usage come from the snapshot's latest ``ServerSample``.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget
from textual.widgets import DataTable

from speclab.model.records import ServerSample
from speclab.session.api import ServerView
from speclab.ui import fmt
from speclab.ui.state import config_label

STATUS_STYLE = {
    "ready": "green3",
    "attached": "green3",
    "starting": "yellow",
    "relaunching": "yellow",
    "exited": "red",
    "stopped": "dim",
}
LOG_LINES = 3


def gauge(fraction: float, width: int = 12) -> Text:
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    style = "red" if fraction >= 0.9 else "yellow" if fraction >= 0.7 else "green3"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def render_server(name: str, view: ServerView | None, sample: ServerSample | None) -> Text:
    out = Text(overflow="fold")
    if view is None:
        out.append(f"{name}: no server information", style="dim")
        return out
    out.append("● ", style=STATUS_STYLE.get(view.status, ""))
    out.append(view.status, style=STATUS_STYLE.get(view.status, ""))
    out.append(f"  {view.engine} · {view.base_url}  ")
    out.append(config_label(view.settings), style="cyan")
    if view.baseline:
        out.append("  (baseline)", style="dim")
    out.append("\n")
    if sample is None:
        out.append("no /metrics sample yet\n", style="dim")
    elif not sample.up:
        out.append(f"DOWN {sample.error or 'not answering /metrics'}\n", style="bold red")
    else:
        out.append("KV ")
        out.append_text(gauge(sample.kv_usage))
        out.append(f" {fmt.pct(sample.kv_usage, 0):>4}   running {sample.running:.0f}   waiting {sample.waiting:.0f}")
        out.append(f"   preemptions {sample.preemptions:.0f}")
        if sample.clock_drift_s is not None:
            out.append(f"   sim clock drift {sample.clock_drift_s * 1000:.0f} ms", style="dim")
        out.append("\n")
    out.append("$ ", style="dim")
    out.append(view.command)
    for line in view.log_tail[-LOG_LINES:]:
        out.append("\n")
        out.append(line, style="dim")
    return out


class ServerCard(Widget):
    DEFAULT_CSS = """
    ServerCard { height: auto; border: round $panel-lighten-2; padding: 0 1; }
    """

    def __init__(self, variant: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.variant = variant
        self.border_title = variant
        self._view: ServerView | None = None
        self._sample: ServerSample | None = None

    def show(self, view: ServerView | None, sample: ServerSample | None) -> None:
        if view == self._view and sample == self._sample:
            return
        layout = view != self._view
        self._view, self._sample = view, sample
        self.refresh(layout=layout)

    def render(self) -> RenderResult:
        return render_server(self.variant, self._view, self._sample)


MEMORY_COLUMNS = (("variant", "variant"), ("weights", "weights"), ("kv", "KV cache tokens"),
                  ("concurrency", "max concurrency"), ("vs", "vs baseline"))


def memory_cells(view: ServerView, baseline: ServerView | None) -> tuple[str, ...]:
    mem = view.memory
    weights = mem.get("weights_gib")
    kv = mem.get("kv_cache_tokens")
    conc = mem.get("max_concurrency")
    base_conc = baseline.memory.get("max_concurrency") if baseline else None
    vs = fmt.NO_DATA if view.baseline else fmt.signed_pct_change(conc, base_conc)
    return (
        view.variant,
        fmt.NO_DATA if weights is None else f"{weights:.2f} GiB",
        fmt.NO_DATA if kv is None else f"{kv:,.0f}",
        fmt.NO_DATA if conc is None else f"{conc:.1f}",
        vs,
    )


class MemoryTable(DataTable[str]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none")
        self._cache: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for key, label in MEMORY_COLUMNS:
            self.add_column(label, key=key)

    def show(self, views: Mapping[str, ServerView], baseline: str) -> None:
        base = views.get(baseline)
        for name, view in views.items():
            cells = memory_cells(view, base)
            if name not in self._cache:
                self.add_row(*cells, key=name)
            elif cells != self._cache[name]:
                for (col, _), value in zip(MEMORY_COLUMNS, cells, strict=True):
                    self.update_cell(name, col, value, update_width=True)
            self._cache[name] = cells
