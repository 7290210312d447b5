"""Messages the snapshot worker posts to the app."""

from __future__ import annotations

from textual.message import Message

from speclab.model.snapshot import Snapshot


class SnapshotArrived(Message):
    """A new snapshot has been taken into the app's state; repaint.

    The state already holds every snapshot (events and intervals are never lost), so a pending
    repaint may be replaced by a newer one when rendering falls behind.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)


class SourceEnded(Message):
    """The snapshot stream ended, normally (``error`` empty) or with one line saying why."""

    def __init__(self, error: str = "") -> None:
        super().__init__()
        self.error = error


class ControlApplied(Message):
    """A control call went through (``ok``) or failed; ``detail`` is the one line shown to the user."""

    def __init__(self, action: str, detail: str, *, ok: bool = True) -> None:
        super().__init__()
        self.action = action
        self.detail = detail
        self.ok = ok
