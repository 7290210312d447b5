"""``?``: every key the lab screen answers to, and why a control is unavailable when it is."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

HelpRow = tuple[str, str, str]  # key, what it does, "" or why it is unavailable


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, rows: list[HelpRow]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys", classes="dialog-title")
            table: DataTable[str] = DataTable(id="keys", cursor_type="none", zebra_stripes=True)
            yield table
            reasons = sorted({why for _, _, why in self.rows if why})
            if reasons:  # said once here, not cut off at the end of each row
                yield Static("\n".join(f"off: {why}" for why in reasons), id="off-why", classes="dialog-hint")
            yield Static("Esc or ? closes · ctrl+p opens the command palette · the mouse works too",
                         classes="dialog-hint")

    def on_mount(self) -> None:
        table = self.query_one("#keys", DataTable)
        table.add_columns("key", "action", "note")
        for key, description, why in self.rows:
            table.add_row(key, description, "off" if why else "")

    def action_close(self) -> None:
        self.dismiss(None)
