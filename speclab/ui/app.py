"""The Textual app: wiring only. One factory, ``create_app``, serves the CLI and the tests.

A worker consumes the source's snapshots, takes each into ``LabState`` (so no interval or event
is lost) and posts a coalescing ``SnapshotArrived``; the lab screen repaints from the state. The
app never talks to servers. ``q`` stops the source (traffic and servers) and exits 0.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.screen import Screen

from speclab.model.errors import SpeclabError
from speclab.model.exit_codes import ExitCode
from speclab.session.api import LiveControls, SnapshotSource
from speclab.ui.messages import SnapshotArrived, SourceEnded
from speclab.ui.priority import LOADED_RATE_S, RenderCap, UiPriority
from speclab.ui.replay import ReplayControls
from speclab.ui.screens.lab import LabScreen
from speclab.ui.state import LabState


class SpeclabApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "speclab"

    def __init__(
        self,
        source: SnapshotSource,
        controls: LiveControls | None = None,
        replay: ReplayControls | None = None,
        *,
        yield_cpu: bool = False,
        stop_on_sigint: bool = False,
    ) -> None:
        """``yield_cpu``: lower the event loop's priority while traffic runs (``speclab lab`` does).
        ``stop_on_sigint``: a SIGINT sent to the process stops like ``q`` and exits 130 (Ctrl-C typed
        in the app is a key: Textual copies with it in a field, and elsewhere says to press q)."""
        super().__init__()
        self._stop_on_sigint = stop_on_sigint
        self.interrupted = False
        self.source = source
        self.controls = controls
        self.replay = replay
        self.state = LabState(source.info)
        self.state.set_servers(source.servers())
        self.stopped = False
        self.source_error: SpeclabError | None = None  # why the source ended early; the CLI exits with it
        self._lab: LabScreen | None = None
        self._render_cap = RenderCap()
        self._pending_paint = False
        self._yield_cpu = yield_cpu
        self.priority = UiPriority()  # the event loop's thread: lowered while traffic runs

    @property
    def lab(self) -> LabScreen:
        assert self._lab is not None, "the lab screen exists once the app runs"
        return self._lab

    def get_default_screen(self) -> Screen[None]:
        self._lab = LabScreen(self.source, self.controls, self.replay, self.state)
        return self._lab

    def on_mount(self) -> None:
        if self._stop_on_sigint:
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint)
        self.consume_snapshots()

    def on_unmount(self) -> None:
        if self._stop_on_sigint:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    def _on_sigint(self) -> None:
        self.interrupted = True
        self.run_worker(self.action_quit(), group="interrupt", exclusive=True)

    @work(group="snapshots", exclusive=True, exit_on_error=False)
    async def consume_snapshots(self) -> None:
        try:
            async for snapshot in self.source.snapshots():
                if self._yield_cpu and self.priority.now is None and not self.stopped:
                    self.priority.lower()  # the first snapshot: workers and servers are up
                self.state.ingest(snapshot)
                self.post_message(SnapshotArrived(snapshot))
        except SpeclabError as error:
            self.source_error = error
            self.post_message(SourceEnded(str(error)))
            return
        self.post_message(SourceEnded())

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        if self._render_cap.due(loaded=message.snapshot.health.saturated):
            self.lab.refresh_view()
        elif not self._pending_paint:  # the newest state is painted within a second regardless
            self._pending_paint = True
            self.set_timer(LOADED_RATE_S, self._deferred_paint)

    def _deferred_paint(self) -> None:
        self._pending_paint = False
        self.lab.refresh_view()

    def on_source_ended(self, message: SourceEnded) -> None:
        self.priority.restore()  # traffic is over
        self.lab.status.ended = True
        self.lab.status.error = message.error
        self.lab.refresh_bindings()  # the traffic controls are over
        self.lab.refresh_view()

    async def action_quit(self) -> None:
        """Stop traffic and servers, then exit 0, or 130 after a SIGINT (1 with the reason if stopping
        failed)."""
        if not self.stopped:
            self.stopped = True
            self.priority.restore()  # stopping (draining, the recording's close) at full priority
            self.workers.cancel_group(self, "snapshots")
            try:
                await self.source.stop()
            except SpeclabError as error:
                self.exit(return_code=ExitCode.INTERNAL_ERROR, message=f"stopping failed: {error}")
                return
        self.exit(return_code=ExitCode.INTERRUPTED if self.interrupted else ExitCode.OK)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, LabScreen):
            return
        commands = [
            ("Toggle corrected latency", "Corrected (from intended send time) or uncorrected", "toggle_corrected"),
            ("Next variant", "Select the next variant", "next_variant"),
            ("Next prompt class", "Select the next prompt class", "next_class"),
            ("Cycle spectrum layout", "Overlay, side by side, selected variant only", "cycle_layout"),
            ("Show keys", "Every key and what it does", "help"),
        ]
        if self.controls is not None and not screen.run_ended:
            commands += [
                ("Pause or resume traffic", "Stop or restart sending requests", "toggle_pause"),
                ("Change arrival rate", "Requests per second, live", "set_rate"),
                ("Change concurrency", "Requests in flight, live", "set_concurrency"),
                ("Relaunch variant", "Change k, max_num_seqs, batched tokens or chunked prefill", "relaunch"),
            ]
        for title, help_text, action in commands:
            yield SystemCommand(title, help_text, _runner(screen, action))


def _runner(screen: LabScreen, action: str):  # type: ignore[no-untyped-def]
    async def run() -> None:
        await screen.run_action(action)

    return run


def create_app(
    source: SnapshotSource,
    controls: LiveControls | None = None,
    *,
    replay: ReplayControls | None = None,
    yield_cpu: bool = False,
    stop_on_sigint: bool = False,
) -> SpeclabApp:
    """The app over ``source``; without ``controls`` (a replay) the traffic controls are disabled."""
    return SpeclabApp(source, controls, replay, yield_cpu=yield_cpu, stop_on_sigint=stop_on_sigint)
