"""Small modal dialogs: a validated number, and a yes/no confirmation."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from speclab.model.errors import InputError
from speclab.model.limits import check_option


class NumberDialog(ModalScreen[float | None]):
    """Ask for one number; dismisses with it, or ``None`` on cancel. Bad input stays in the dialog."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, prompt: str, value: float | None, *, integer: bool, low: float, high: float,
                 low_open: bool = False) -> None:
        """The value must lie in [low, high] ((low, high] with ``low_open``): the range the command line
        takes for the same option, checked by the same ``check_option`` (its message, in the dialog)."""
        super().__init__()
        self.title_text = title
        self.prompt = prompt
        self.initial = value
        self.integer = integer
        self.range = (low, high, low_open)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Label(self.prompt)
            initial = "" if self.initial is None else (f"{self.initial:g}")
            yield Input(initial, type="integer" if self.integer else "number", id="value")
            yield Static("", id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply", variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#value", Input).focus()

    def parse(self, text: str) -> float | None:
        try:
            value = float(int(text)) if self.integer else float(text)
        except ValueError:
            self.query_one("#error", Static).update(f"enter {'a whole number' if self.integer else 'a number'}")
            return None
        low, high, low_open = self.range
        try:
            check_option(self.title_text.lower(), value, low, high, low_open=low_open)
        except InputError as error:
            self.query_one("#error", Static).update(str(error))
            return None
        return value

    def submit(self) -> None:
        value = self.parse(self.query_one("#value", Input).value.strip())
        if value is not None:
            self.dismiss(value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "ok":
            self.submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """A consequential action spelled out, with Cancel focused so Enter alone does not confirm."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Confirm"),
        Binding("n,escape", "cancel", "Cancel"),
    ]

    def __init__(self, title: str, body: str, confirm_label: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.body, id="body")
            yield Static("y confirms · n or Esc cancels", classes="dialog-hint")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.confirm_label, variant="warning", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
