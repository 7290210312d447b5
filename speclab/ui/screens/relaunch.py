"""Edit one variant's server settings and speculative knobs; returns only what changed, for a confirmation step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from speclab.model import limits as L
from speclab.model.speculative import DRAFT_SAMPLE_METHODS, REJECTION_SAMPLE_METHODS

from .relaunch_spec import (
    DRAFT_SAMPLING_KEY,
    REJECTION_KEY,
    SCHEDULE_KEY,
    SYNTHETIC_LENGTH_KEY,
    format_schedule,
    parse_schedule,
    spec_before,
    spec_changes,
)

K_KEY = "num_speculative_tokens"
SEQS_KEY = "max_num_seqs"
BATCHED_KEY = "max_num_batched_tokens"
CHUNKED_KEY = "enable_chunked_prefill"

FIELDS: tuple[tuple[str, str, int, int], ...] = (  # key, label, and the range a lab file accepts
    (K_KEY, "draft length k", 1, L.MAX_SPEC_TOKENS),
    (SEQS_KEY, "max_num_seqs", 1, L.MAX_NUM_SEQS),
    (BATCHED_KEY, "max_num_batched_tokens", 16, L.MAX_BATCHED_TOKENS),
)


def current_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The launched settings under the relaunch keys (``k`` is accepted for the draft length)."""
    out: dict[str, Any] = {}
    k = settings.get(K_KEY, settings.get("k"))
    if k is not None:
        out[K_KEY] = int(k)
    for key in (SEQS_KEY, BATCHED_KEY):
        if settings.get(key) is not None:
            out[key] = int(settings[key])
    if settings.get(CHUNKED_KEY) is not None:
        out[CHUNKED_KEY] = bool(settings[CHUNKED_KEY])
    if settings.get("method") or k is not None:  # a speculative variant: its knobs, vLLM's defaults written out
        out.update(spec_before(settings))
    return out


def describe_changes(variant: str, before: Mapping[str, Any], changes: Mapping[str, Any]) -> str:
    lines = [f"Relaunch {variant} with:"]
    for key, value in changes.items():
        lines.append(f"  {key}: {_show(before.get(key))} → {_show(value)}")
    lines.append("")
    lines.append(f"{variant} stops serving while it restarts; the other variants keep running.")
    lines.append("Its numbers so far stay with its current config epoch; the new config starts a new one")
    lines.append("once its server answers, and the restart between them is counted in neither.")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return format_schedule(value) or "none"
    return str(value)


class RelaunchDialog(ModalScreen[dict[str, Any] | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # noqa: RUF012 (Textual declares it unannotated)

    def __init__(self, variant: str, settings: Mapping[str, Any], *, speculative: bool) -> None:
        super().__init__()
        self.variant = variant
        self.before = current_settings(settings)
        self.speculative = speculative

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Label(f"Relaunch {self.variant}", classes="dialog-title")
            for key, label, _, _ in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    value = self.before.get(key)
                    disabled = key == K_KEY and not self.speculative
                    yield Input(
                        "" if value is None else str(value),
                        placeholder="server default",
                        type="integer",
                        id=key,
                        disabled=disabled,
                        compact=True,
                    )
            with Horizontal(classes="field"):
                yield Label("chunked prefill", classes="field-label")
                yield Switch(bool(self.before.get(CHUNKED_KEY, True)), id=CHUNKED_KEY)
            if self.speculative:
                yield from self._spec_fields()
            note = "" if self.speculative else "baseline: no draft, so k cannot be set"
            yield Static(note, id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Review…", variant="primary", id="review", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def _spec_fields(self) -> ComposeResult:
        """k by batch size, draft sampling, rejection method and the synthetic target length."""
        with Horizontal(classes="field"):
            yield Label("k by batch size", classes="field-label")
            yield Input(format_schedule(self.before.get(SCHEDULE_KEY)), placeholder="one k (e.g. 1-16:4, 17-64:2)",
                        id=SCHEDULE_KEY, compact=True)
        with Horizontal(classes="field"):
            yield Label("draft sampling", classes="field-label")
            yield Select([(m, m) for m in DRAFT_SAMPLE_METHODS], value=self.before.get(DRAFT_SAMPLING_KEY, "greedy"),
                         allow_blank=False, id=DRAFT_SAMPLING_KEY, compact=True)
        with Horizontal(classes="field"):
            yield Label("rejection method", classes="field-label")
            yield Select([(m, m) for m in REJECTION_SAMPLE_METHODS], value=self.before.get(REJECTION_KEY, "standard"),
                         allow_blank=False, id=REJECTION_KEY, compact=True)
        with Horizontal(classes="field"):
            yield Label("synthetic acc. length", classes="field-label")
            length = self.before.get(SYNTHETIC_LENGTH_KEY)
            yield Input("" if length is None else str(length), placeholder="synthetic only", id=SYNTHETIC_LENGTH_KEY,
                        compact=True)

    def _spec_changes(self, k: int | None) -> dict[str, Any]:
        """The knobs that changed; ValueError whose text starts with the field's label."""
        try:
            schedule = parse_schedule(self.query_one(f"#{SCHEDULE_KEY}", Input).value, k)
        except ValueError as exc:
            raise ValueError(f"k by batch size: {exc}") from None
        sampling = str(self.query_one(f"#{DRAFT_SAMPLING_KEY}", Select).value)
        rejection = str(self.query_one(f"#{REJECTION_KEY}", Select).value)
        return spec_changes(self.before, schedule, sampling, rejection,
                            self.query_one(f"#{SYNTHETIC_LENGTH_KEY}", Input).value, k)

    def on_mount(self) -> None:
        first = K_KEY if self.speculative else SEQS_KEY
        self.query_one(f"#{first}", Input).focus()

    def changes(self) -> dict[str, Any] | None:
        """Changed settings, or ``None`` after showing why the form is not acceptable."""
        error = self.query_one("#error", Static)
        out: dict[str, Any] = {}
        for key, label, minimum, maximum in FIELDS:
            field = self.query_one(f"#{key}", Input)
            if field.disabled:
                continue
            text = field.value.strip()
            if not text:
                if key in self.before:
                    error.update(f"{label}: enter a value")
                    return None
                continue
            try:
                value = int(text)
            except ValueError:
                error.update(f"{label}: enter a whole number")
                return None
            if not minimum <= value <= maximum:
                error.update(f"{label}: must be between {minimum} and {maximum}")
                return None
            if value != self.before.get(key):
                out[key] = value
        chunked = self.query_one(f"#{CHUNKED_KEY}", Switch).value
        if chunked != self.before.get(CHUNKED_KEY, True):
            out[CHUNKED_KEY] = chunked
        if self.speculative:
            try:
                out.update(self._spec_changes(out.get(K_KEY, self.before.get(K_KEY))))
            except ValueError as exc:
                error.update(str(exc))
                return None
        if not out:
            error.update("nothing changed")
            return None
        return out

    def review(self) -> None:
        changes = self.changes()
        if changes is not None:
            self.dismiss(changes)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.review()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "review":
            self.review()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
