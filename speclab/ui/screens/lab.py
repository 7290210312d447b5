"""The lab screen: six tabs over one snapshot stream, and every key the lab answers to.

The screen owns the view options (selected variant and class, corrected or not, spectrum layout)
and the control flows (dialogs, confirmation, the call to ``LiveControls``). Rendering is in
place: widgets are created once in ``compose`` and ``refresh_view`` hands them new data, painting
only the tab that is showing.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from speclab.model import limits as L
from speclab.model.errors import SpeclabError
from speclab.model.latency_metrics import BY_METRIC, LATENCY_METRICS, Shown, Source, shown_in
from speclab.model.names import CORRECTED, Metric
from speclab.model.snapshot import ALL_CLASSES, ClassStats
from speclab.session.api import LiveControls, SnapshotSource
from speclab.ui.messages import ControlApplied
from speclab.ui.replay import ReplayControls
from speclab.ui.screens.dialogs import ConfirmDialog, NumberDialog
from speclab.ui.screens.help import HelpRow, HelpScreen
from speclab.ui.screens.relaunch import RelaunchDialog, current_settings, describe_changes
from speclab.ui.state import LabState
from speclab.ui.widgets.ab import ABTable, ab_title
from speclab.ui.widgets.acceptance import AcceptanceDetail, AcceptanceTable
from speclab.ui.widgets.breakdown import Breakdown, breakdown_row
from speclab.ui.widgets.replay_bar import ReplayBar
from speclab.ui.widgets.servers import MemoryTable, ServerCard
from speclab.ui.widgets.spectrum import LAYOUTS, Curve, Layout, SpectrumChart
from speclab.ui.widgets.status import StatusBar, StatusLine
from speclab.ui.widgets.timeseries import TimeSeries
from speclab.ui.widgets.workers import WorkersPanel

SPECTRA: tuple[tuple[Metric, str], ...] = tuple((m, BY_METRIC[m].label) for m in shown_in(Shown.SPECTRUM))
SERVER_METRICS = {m.metric for m in LATENCY_METRICS if m.source is Source.SERVER}
PALETTE = ("grey85", "cyan", "magenta", "green3", "orange1", "dodger_blue2")
TABS = ("latency", "acceptance", "series", "servers", "ab", "workers")
CONTROL_ACTIONS = {"set_rate", "set_concurrency", "relaunch"}
REPLAY_ACTIONS = {"replay_speed", "replay_seek"}
SOURCE_LABEL = {
    "exact": "exact per-request",
    "server_metrics": "server /metrics, all classes, bucket estimates",
    "mixed": "mixed: per-request where given",
    "estimated": "estimated",
    "none": "no source",
}
NO_CONTROLS = "replay: there is no live traffic to control"
RUN_ENDED = "the run has ended: there is no traffic left to control"


@dataclass(slots=True)
class ViewOptions:
    variant: str
    prompt_class: str = ALL_CLASSES
    corrected: bool = True
    layout: Layout = "overlay"
    stat: str = "p50"


class LabScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "app.quit", "Quit", tooltip="Stop traffic and servers, then exit"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="This list of keys"),
        Binding("space", "toggle_pause", "Pause", tooltip="Pause or resume traffic (replay: playback)"),
        Binding("r", "set_rate", "Rate", tooltip="Change the arrival rate (requests/s), live"),
        Binding("n", "set_concurrency", "Concurrency", tooltip="Change the requests in flight, live"),
        Binding("e", "relaunch", "Relaunch",
                tooltip="Change k, max_num_seqs, batched tokens or chunked prefill; relaunch after confirming"),
        Binding("c", "toggle_corrected", "Corrected", tooltip="Corrected (from intended send) or uncorrected latency"),
        Binding("v", "next_variant", "Variant", tooltip="Select the next variant"),
        Binding("p", "next_class", "Class", tooltip="Select the next prompt class (or all)"),
        Binding("o", "cycle_layout", "Layout", tooltip="Spectra: variants overlaid, side by side, or selected only"),
        Binding("m", "toggle_stat", "p50/tail", show=False,
                tooltip="Where the time goes: requests at the p50, or the tail at or above the p99"),
        Binding("1", "show_tab('latency')", "Latency", show=False, tooltip="Latency spectra and time breakdown"),
        Binding("2", "show_tab('acceptance')", "Acceptance", show=False, tooltip="Acceptance per class and variant"),
        Binding("3", "show_tab('series')", "Time series", show=False, tooltip="Throughput, rejection, p99 over time"),
        Binding("4", "show_tab('servers')", "Servers", show=False, tooltip="Status, command, logs, memory"),
        Binding("5", "show_tab('ab')", "A/B", show=False, tooltip="Current config vs previous and baseline"),
        Binding("6", "show_tab('workers')", "Workers", show=False,
                tooltip="Traffic workers: node, schedule and loop lag, CPU, clock offset, flagged intervals"),
        Binding("left_square_bracket", "replay_speed(0.5)", "Slower", key_display="[", tooltip="Half the replay speed"),
        Binding("right_square_bracket", "replay_speed(2.0)", "Faster", key_display="]", tooltip="Double the replay speed"),
        Binding("comma", "replay_seek(-10)", "-10 s", key_display=",", tooltip="Replay: back 10 s"),
        Binding("full_stop", "replay_seek(10)", "+10 s", key_display=".", tooltip="Replay: forward 10 s"),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012 (Textual declares it unannotated)

    def __init__(
        self,
        source: SnapshotSource,
        controls: LiveControls | None,
        replay: ReplayControls | None,
        state: LabState,
    ) -> None:
        super().__init__()
        self.source = source
        self.controls = controls
        self.replay = replay
        self.state = state
        info = source.info
        self.variant_colors = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(info.variants)}
        speculative = [v for v in info.variants if v != state.baseline]
        self.view = ViewOptions(variant=(speculative or list(info.variants) or [""])[0])
        self.status = StatusLine(info, controls="live" if controls else NO_CONTROLS)
        self.traffic_paused = False
        self._ab_shown: tuple[str, str, bool, int, bool] | None = None

    def compose(self) -> ComposeResult:
        info = self.source.info
        yield StatusBar(self.status, id="status")
        with TabbedContent(initial="latency", id="tabs"):
            with TabPane("1 Latency", id="latency"), VerticalScroll():
                with Grid(id="spectra"):
                    for metric, _ in SPECTRA:
                        yield SpectrumChart(id=f"spec-{metric.value}")
                yield Breakdown(id="breakdown")
            with TabPane("2 Acceptance", id="acceptance"), VerticalScroll():
                yield AcceptanceTable(id="acc-table")
                yield AcceptanceDetail(id="acc-detail")
            with TabPane("3 Time series", id="series"), VerticalScroll():
                yield TimeSeries(self.state, self.variant_colors, id="timeseries")
            with TabPane("4 Servers", id="servers"), VerticalScroll():
                for variant in info.variants:
                    yield ServerCard(variant, id=f"server-{variant}")
                yield Static("memory", classes="section-title")
                yield MemoryTable(id="memory")
            with TabPane("5 A/B", id="ab"), VerticalScroll():
                yield Static("", id="ab-title")
                yield ABTable(id="ab-table")
                yield Static("", id="ab-note", classes="note")
            with TabPane("6 Workers", id="workers"), VerticalScroll():
                yield WorkersPanel(id="workers-panel")
        if self.replay is not None:
            yield ReplayBar(self.replay, id="replay-bar")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.refresh_view()

    # -- rendering ---------------------------------------------------------------------------

    def refresh_view(self) -> None:
        """Repaint the status lines and the tab that is showing from the app's state (nothing once
        the app is exiting: a repaint deferred by the render cap may fire while widgets go)."""
        if not self.is_attached:
            return
        self.status.snapshot = self.state.latest
        self.status.servers = self.source.servers()  # a server that exited is said on every tab
        self.status.variant = self.view.variant
        self.status.prompt_class = self.view.prompt_class
        self.status.corrected = self.view.corrected
        self.query_one(StatusBar).refresh()
        if self.replay is not None:
            self.query_one(ReplayBar).refresh()
        tab = self.query_one(TabbedContent).active
        if tab == "latency":
            self._show_latency()
        elif tab == "acceptance":
            self._show_acceptance()
        elif tab == "series":
            self.query_one(TimeSeries).show(self.view.corrected)
        elif tab == "servers":
            self._show_servers()
        elif tab == "ab":
            self._show_ab()
        elif tab == "workers":
            snap = self.state.latest
            self.query_one(WorkersPanel).show(snap.workers if snap else (), replay=self.source.info.replay)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_view()

    def _label(self, variant: str) -> str:
        """The variant's current config epoch as users read it (``k4``, ``k4·2 (k=6)``)."""
        snap = self.state.latest
        stats = snap.cumulative.get(variant) if snap is not None else None
        return (stats.label if stats is not None else "") or variant

    def _class_stats(self, variant: str, cls: str) -> ClassStats | None:
        snap = self.state.latest
        if snap is None or variant not in snap.cumulative:
            return None
        return snap.cumulative[variant].classes.get(cls)

    def _show_latency(self) -> None:
        view, info = self.view, self.source.info
        sim = " · simulated" if (self.state.latest.simulated if self.state.latest else info.simulated) else ""
        for metric, title in SPECTRA:
            shown = CORRECTED.get(metric, metric) if view.corrected else metric
            curves = []
            for variant in info.variants:
                stats = self._class_stats(variant, view.prompt_class)
                pct = stats.latency.get(shown.value) if stats else None
                if pct is not None and pct.values:
                    curves.append(Curve(self._label(variant), pct.values, self.variant_colors[variant],
                                        variant == view.variant))
            if metric in CORRECTED:
                source = "corrected" if view.corrected else "uncorrected"
            elif metric in SERVER_METRICS:
                stats = self._class_stats(view.variant, view.prompt_class)
                source = SOURCE_LABEL.get(stats.timing_source if stats else "none", "no source")
            else:
                source = BY_METRIC[metric].note
            chart = self.query_one(f"#spec-{metric.value}", SpectrumChart)
            chart.show(f"{title} · {view.prompt_class}", f"{source}{sim}", curves, view.layout)
        rows = []
        for cls in (*info.classes, ALL_CLASSES):
            stats = self._class_stats(view.variant, cls)
            row = breakdown_row(cls, stats, view.stat) if stats is not None else None
            if row is not None:
                rows.append(row)
        total = self._class_stats(view.variant, ALL_CLASSES)
        timing = SOURCE_LABEL.get(total.timing_source if total else "none", "no source")
        at = "requests at e2e p50" if view.stat == "p50" else "requests at or above e2e p99"
        self.query_one(Breakdown).show(
            f"where the time goes · {self._label(view.variant)} · {at} (m)",
            f"server timing: {timing}{sim}",
            rows,
        )

    def _show_acceptance(self) -> None:
        snap = self.state.latest
        if snap is None:
            return
        info = self.source.info
        self.query_one(AcceptanceTable).show(snap, info.variants, info.classes)
        stats = self._class_stats(self.view.variant, self.view.prompt_class)
        if stats is not None:
            self.query_one(AcceptanceDetail).show(f"{self._label(self.view.variant)} · {self.view.prompt_class}",
                                                  stats.acceptance)

    def _show_servers(self) -> None:
        views = self.status.servers  # read once per repaint, in refresh_view
        samples = self.state.latest.servers if self.state.latest else {}
        for variant in self.source.info.variants:
            self.query_one(f"#server-{variant}", ServerCard).show(views.get(variant), samples.get(variant))
        self.query_one(MemoryTable).show(views, self.state.baseline)

    def _show_ab(self) -> None:
        variant, prompt_class = self.view.variant, self.view.prompt_class
        snap = self.state.latest
        view = snap.ab.get(variant) if snap is not None else None
        scope = "all classes" if prompt_class == ALL_CLASSES else prompt_class
        if variant == self.state.baseline:
            title = f"{variant} is the baseline — press v to pick a speculative variant to compare"
        else:
            title = ab_title(view, variant, scope)
        _update(self.query_one("#ab-title", Static), title)
        _update(self.query_one("#ab-note", Static), ab_note(prompt_class, view.previous.note if view and view.previous else ""))
        shown = (variant, prompt_class, self.view.corrected, self.state.intervals_taken, bool(view and view.relaunching))
        if shown != self._ab_shown:  # the windows change once per closed interval, not per snapshot
            self._ab_shown = shown
            self.query_one(ABTable).show(view, self.view.corrected, prompt_class)

    @property
    def run_ended(self) -> bool:
        """A live run's final snapshot has come: its traffic and controls are over."""
        snap = self.state.latest
        return self.replay is None and (self.status.ended or (snap is not None and snap.finished))

    # -- view actions ------------------------------------------------------------------------

    def action_toggle_corrected(self) -> None:
        self.view.corrected = not self.view.corrected
        self.refresh_view()

    def action_next_variant(self) -> None:
        self.view.variant = _next(self.source.info.variants, self.view.variant)
        self.refresh_view()

    def action_next_class(self) -> None:
        self.view.prompt_class = _next((ALL_CLASSES, *self.source.info.classes), self.view.prompt_class)
        self.refresh_view()

    def action_cycle_layout(self) -> None:
        self.view.layout = _next(LAYOUTS, self.view.layout)
        self.refresh_view()

    def action_toggle_stat(self) -> None:
        self.view.stat = "tail" if self.view.stat == "p50" else "p50"
        self.refresh_view()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def select(self, variant: str, prompt_class: str) -> None:
        if variant in self.source.info.variants:
            self.view.variant = variant
        if prompt_class in (ALL_CLASSES, *self.source.info.classes):
            self.view.prompt_class = prompt_class
        self.refresh_view()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, AcceptanceTable) and event.row_key.value:
            variant, _, rest = event.row_key.value.partition("/")
            self.select(variant, rest.partition("/")[2])

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.help_rows()))

    def help_rows(self) -> list[HelpRow]:
        rows: list[HelpRow] = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            action, _, _ = binding.action.partition("(")
            allowed = self.check_action(action, ())
            if allowed is False and action in REPLAY_ACTIONS:  # a live run has no playback keys
                continue
            why = "" if allowed else (RUN_ENDED if self.controls is not None else NO_CONTROLS)
            rows.append((binding.key_display or binding.key, binding.tooltip or binding.description, why))
        rows.append(("ctrl+p", "Command palette", ""))
        return rows

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Traffic keys: off in a replay (False: not in the footer, which keeps room for the playback
        keys; the help still lists them, saying why) and dimmed once a live run has ended (None)."""
        if action in CONTROL_ACTIONS or (action == "toggle_pause" and self.replay is None):
            if self.controls is None:
                return False
            return None if self.run_ended else True
        return not (action in REPLAY_ACTIONS and self.replay is None)

    # -- controls ----------------------------------------------------------------------------

    async def _call(self, action: str, call: Awaitable[None], detail: str) -> bool:
        try:
            await call
        except SpeclabError as error:
            self.post_message(ControlApplied(action, str(error), ok=False))
            self.notify(str(error), title=f"{action} failed", severity="error")
            return False
        self.post_message(ControlApplied(action, detail))
        self.notify(detail, title=action)
        return True

    async def action_toggle_pause(self) -> None:
        if self.controls is not None:
            if self.traffic_paused:
                if await self._call("resume", self.controls.resume(), "traffic resumed"):
                    self.traffic_paused = False
            elif await self._call("pause", self.controls.pause(), "traffic paused"):
                self.traffic_paused = True
        elif self.replay is not None:
            playing = self.replay.playing
            call = self.replay.pause() if playing else self.replay.play()
            await self._call("replay", call, "playback paused" if playing else "playback resumed")
            self.refresh_view()

    async def action_replay_speed(self, factor: float) -> None:
        if self.replay is not None:
            speed = min(L.MAX_REPLAY_SPEED, max(L.MIN_REPLAY_SPEED, self.replay.speed * factor))
            await self._call("replay", self.replay.set_speed(speed), f"speed ×{speed:g}")
            self.refresh_view()

    async def action_replay_seek(self, delta: float) -> None:
        if self.replay is not None:
            target = min(self.replay.duration, max(0.0, self.replay.position + delta))
            await self._call("replay", self.replay.seek(target), f"seek to {target:.0f} s")
            self.refresh_view()

    @work(group="controls", exclusive=True)
    async def action_set_rate(self) -> None:
        if self.controls is None:
            return
        rate = await self.app.push_screen_wait(
            NumberDialog("Arrival rate", "requests per second (open loop), applied live"
                         + (" (modelled time)" if self.source.info.time_scale != 1.0 else ""),
                         self.status.info.arrival.get("rate"), integer=False, low=0, high=L.MAX_RATE, low_open=True)
        )
        if rate is not None and await self._call("set_rate", self.controls.set_rate(rate), f"rate → {rate:g} req/s"):
            self._offered("rate", rate)

    @work(group="controls", exclusive=True)
    async def action_set_concurrency(self) -> None:
        if self.controls is None:
            return
        value = await self.app.push_screen_wait(
            NumberDialog("Concurrency", "requests in flight (closed loop), applied live",
                         self.status.info.arrival.get("concurrency"), integer=True, low=1, high=L.MAX_CONCURRENCY)
        )
        if value is not None:
            n = int(value)
            if await self._call("set_concurrency", self.controls.set_concurrency(n), f"concurrency → {n}"):
                self._offered("concurrency", n)

    def _offered(self, key: str, value: float) -> None:
        """The load now offered, in the status line and as the dialog's next starting value."""
        info = self.status.info
        self.status.info = replace(info, arrival={**info.arrival, key: value})
        self.refresh_view()

    @work(group="controls", exclusive=True)
    async def action_relaunch(self) -> None:
        if self.controls is None:
            return
        variant = self.view.variant
        server = self.source.servers().get(variant)
        settings: dict[str, Any] = dict(server.settings) if server else {}
        speculative = variant != self.state.baseline
        changes = await self.app.push_screen_wait(RelaunchDialog(variant, settings, speculative=speculative))
        if not changes:
            return
        body = describe_changes(variant, current_settings(settings), changes)
        if not await self.app.push_screen_wait(ConfirmDialog(f"Relaunch {variant}?", body, "Relaunch")):
            self.notify("relaunch cancelled", title="relaunch")
            return
        summary = ", ".join(f"{k}={v}" for k, v in changes.items())
        await self._call("relaunch", self.controls.relaunch(variant, changes), f"relaunching {variant}: {summary}")


def ab_note(prompt_class: str, previous_note: str = "") -> str:
    """What the A/B rows are over, and the key that narrows them to one prompt class."""
    scope = (
        "All classes together; press p to compare one prompt class."
        if prompt_class == ALL_CLASSES
        else f"Only {prompt_class} requests, on both sides; p: next class."
    )
    shorter = f" The previous window is shorter: {previous_note}." if previous_note else ""
    return (
        f"{scope} Each config epoch is compared with the baseline over the same whole 1 s intervals "
        "(same traffic); the previous one over as many intervals just before its relaunch. The "
        "relaunch itself (restart, its failed requests) is in neither. Percentiles are over the window; "
        f"rates change in points, times in percent.{shorter}"
    )


def _update(widget: Static, text: str) -> None:
    """Set a Static's text only when it changed (an update always asks for a layout pass)."""
    if str(widget.content) != text:
        widget.update(text)


def _next(options: tuple[Any, ...], current: Any) -> Any:
    if not options:
        return current
    try:
        return options[(options.index(current) + 1) % len(options)]
    except ValueError:
        return options[0]

