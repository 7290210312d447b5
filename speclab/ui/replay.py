"""The hook a replay source plugs into: play/pause, speed and a timeline.

A replay implements ``SnapshotSource`` (the screens cannot tell it from a live run) and, for the
replay bar, this protocol. It is structural, so the recording layer implements it without
importing anything from the UI. ``create_app(source, replay=...)`` mounts the bar and its keys.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ReplayControls(Protocol):
    @property
    def playing(self) -> bool: ...

    @property
    def speed(self) -> float:
        """Playback speed relative to recorded time (1.0 = as recorded)."""
        ...

    @property
    def position(self) -> float:
        """Seconds since the recorded run started."""
        ...

    @property
    def duration(self) -> float: ...

    async def play(self) -> None: ...
    async def pause(self) -> None: ...
    async def set_speed(self, speed: float) -> None: ...
    async def seek(self, t: float) -> None: ...
