"""Link each spike to the nearest change before it, so a report says what it followed.

A change is anything that alters what answers a request: a config epoch (a relaunch, which is
also how a new draft revision arrives), a gateway route or weight change, a rollback. "This spike
began 12 s after tenant B moved to k4" is then written from the events, not left to be inferred.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from speclab.model.records import Event

CHANGE_KINDS = ("route_change", "weight_change", "rollback", "relaunch", "transition", "launch")


def change_text(event: Event) -> str:
    text = event.message.removeprefix("gateway: ")
    data = event.data or {}
    what = data.get("what") if isinstance(data.get("what"), dict) else None
    if event.kind == "route_change" and what and "name" in what:
        text = f"{what['kind']} {what['name']} moved from {what['from']} to {what['to']}"
    elif event.kind == "relaunch":
        changes = data.get("changes") or data.get("requested") or {}
        revisions = [f"{k}={v}" for k, v in changes.items() if "revision" in k] if isinstance(changes, dict) else []
        text = f"{event.variant} relaunched{' with ' + ', '.join(revisions) if revisions else ''} ({event.message})"
    return text


def nearest_change(t: float, events: Iterable[Event]) -> Event | None:
    """The latest change at or before ``t`` (run-clock seconds)."""
    best: Event | None = None
    for event in events:
        if event.kind in CHANGE_KINDS and event.t <= t and (best is None or event.t >= best.t):
            best = event
    return best


def link(t: float, what: str, events: Iterable[Event]) -> dict[str, Any]:
    """``{"t", "what", "after_change", "after_s", "text"}`` for a spike that began at ``t``."""
    change = nearest_change(t, events)
    if change is None:
        return {"t": round(t, 3), "what": what, "after_change": None, "after_s": None,
                "text": f"{what} began at t={t:.1f} s, with no change before it"}
    after = t - change.t
    return {"t": round(t, 3), "what": what, "after_change": {"t": round(change.t, 3), "kind": change.kind,
                                                             "message": change.message},
            "after_s": round(after, 3), "text": f"{what} began {after:.1f} s after {change_text(change)}"}
