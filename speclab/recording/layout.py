"""File names of a recording directory (docs/file-formats.md) and the manifest's format tag."""

from __future__ import annotations

from typing import Final

MANIFEST: Final = "manifest.json"
REQUESTS: Final = "requests.jsonl"
INTERVALS: Final = "intervals.hlog"
SAMPLES: Final = "server_samples.jsonl"
EVENTS: Final = "events.jsonl"
LOGS: Final = "logs"

FORMAT: Final = "speclab-recording/1"

# A comment line the writer appends to intervals.hlog once every file holds interval N completely;
# hdrh's own reader skips it. A crashed recording replays up to the last such marker.
CLOSED_MARK: Final = "#[speclab closed interval "

# Event kind the writer uses to keep client saturation in the timeline (replayed via mark_saturated).
SATURATED_EVENT: Final = "client_saturated"


def closed_mark(index: int, end_s: float) -> str:
    return f"{CLOSED_MARK}{index} end {end_s:.3f}]\n"


def safe_name(part: str) -> str:
    """A variant or class name made safe as a file name (no separators, spaces, commas or ``=``)."""
    return "".join("_" if ch in ", \t\r\n=./\\" else ch for ch in part)


def log_file(variant: str) -> str:
    return f"{LOGS}/{safe_name(variant)}.log"
