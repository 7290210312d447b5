"""Recordings: write a run to disk incrementally, read it back, replay it, compare two, refire one."""

from __future__ import annotations

from .compare import compare_recordings, render_markdown, write_comparison
from .reader import Recording
from .refire import refire_plan, refire_traffic_plan
from .replay import ReplaySource, replay_final_snapshot
from .writer import RecordingWriter

__all__ = [
    "Recording",
    "RecordingWriter",
    "ReplaySource",
    "compare_recordings",
    "refire_plan",
    "refire_traffic_plan",
    "render_markdown",
    "replay_final_snapshot",
    "write_comparison",
]
