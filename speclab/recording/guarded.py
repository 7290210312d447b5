"""A recording writer that stops, in one line, when the disk does, instead of ending the run.

A full disk or a vanished directory mid-run must not cost the measurement: the first ``OSError``
from any write stops the recording (what was flushed stays replayable up to its last closed
interval), ``on_failure`` gets one line, and every later call is a no-op, so the run goes on and
its report is still written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import layout
from .prompts import write_prompts
from .writer import RecordingWriter, write_json_atomic

FAILED_STATUS = "write_failed"


class GuardedWriter(RecordingWriter):
    def __init__(self, *args: Any, on_failure: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        self.failure: str | None = None
        self._on_failure = on_failure
        super().__init__(*args, **kwargs)

    def _guard(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None:
            return None
        try:
            return call(*args, **kwargs)
        except OSError as error:
            if self.failure is None:  # a nested call may have stopped it already
                self.failure = (f"recording stopped: {self.path}: {error.strerror or error}; "
                                "it replays up to its last flushed interval")
                self._abandon()
                if self._on_failure is not None:
                    self._on_failure(self.failure)
            return None

    def _abandon(self) -> None:
        for name in ("_requests", "_samples", "_events", "_hlog"):
            fh = getattr(self, name, None)
            if fh is not None:
                with contextlib.suppress(OSError, ValueError):
                    fh.close()
        with contextlib.suppress(Exception):
            self._hlog_lines.close()
        self._closed = True

    def write_prompts(self, items: Iterable[Mapping[str, Any]]) -> None:
        """The prompts table (``prompts.py``): the records then keep only a reference to each prompt."""
        self._guard(write_prompts, self.path, items)

    def write_records(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().write_records, *args, **kwargs)

    def write_samples(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().write_samples, *args, **kwargs)

    def write_events(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().write_events, *args, **kwargs)

    def mark_saturated(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().mark_saturated, *args, **kwargs)

    def write_interval(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().write_interval, *args, **kwargs)

    def write_closed_intervals(self, *args: Any, **kwargs: Any) -> int:
        result = self._guard(super().write_closed_intervals, *args, **kwargs)
        return int(result) if result is not None else -1

    def copy_log(self, *args: Any, **kwargs: Any) -> Any:
        return self._guard(super().copy_log, *args, **kwargs)

    def flush(self, *args: Any, **kwargs: Any) -> None:
        self._guard(super().flush, *args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> None:
        if self.failure is None:
            self._guard(super().close, *args, **kwargs)
        if self.failure is not None:
            # Not "complete": the reader then trusts it only up to the last closed interval.
            self.manifest.update(status=FAILED_STATUS, write_error=self.failure, last_closed_interval=self._last_closed)
            with contextlib.suppress(OSError):
                write_json_atomic(self.path / layout.MANIFEST, self.manifest)
