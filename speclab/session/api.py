"""What front ends (the Textual app, the headless printer) see of a session or a replay.

Both live runs and replays implement ``SnapshotSource``; only live runs implement
``LiveControls``. Front ends never talk to servers themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from speclab.model.snapshot import Snapshot
from speclab.model.views import ServerView, SessionInfo

__all__ = ["LiveControls", "ServerView", "SessionInfo", "SnapshotSource"]


@runtime_checkable
class SnapshotSource(Protocol):
    info: SessionInfo

    def snapshots(self) -> AsyncIterator[Snapshot]:
        """Snapshots at about 4 Hz until the run ends (the last one has ``finished=True``)."""
        ...

    def servers(self) -> dict[str, ServerView]: ...

    async def stop(self) -> None: ...


@runtime_checkable
class LiveControls(Protocol):
    async def pause(self) -> None: ...
    async def resume(self) -> None: ...
    async def set_rate(self, rate: float) -> None: ...
    async def set_concurrency(self, concurrency: int) -> None: ...
    async def relaunch(self, variant: str, changes: dict[str, Any]) -> None:
        """Relaunch one variant with changed settings (num_speculative_tokens, max_num_seqs,
        max_num_batched_tokens, enable_chunked_prefill) while the others keep serving: a new
        config epoch once the new server answers; the restart in between is a transition."""
        ...
