"""Writes a recording directory incrementally, so a crash, SIGKILL or Ctrl-C leaves it replayable.

Order matters: per closed interval the writer first makes requests, samples and events durable,
then appends that interval's histograms and a closing marker to ``intervals.hlog``. A reader
therefore trusts everything up to the last marker and drops what follows (see reader.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from speclab.metrics.hlog import HlogWriter
from speclab.model.errors import InputError
from speclab.model.files import write_text_atomic
from speclab.model.records import Event, RequestRecord, ServerSample

from . import layout
from .scrub import Scrubber

_REQUIRED = ("variants", "classes")


class HistogramLike(Protocol):
    """A LatencyHistogram or the aggregator's EncodedHistogram: what one .hlog line needs."""

    @property
    def count(self) -> int: ...
    @property
    def max_us(self) -> int: ...
    def encode(self) -> str: ...


class ClosedIntervals(Protocol):
    """What the writer needs of the metrics Aggregator."""

    @property
    def last_closed_interval(self) -> int: ...
    def iter_closed_intervals(self, since: int = -1) -> Iterator[tuple[int, float, float, str, Any]]: ...


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


class RecordingWriter:
    """``RecordingWriter(path, manifest)``; then write_* as data arrives, ``flush`` per interval, ``close``.

    ``secrets`` are exact values (for example the API key read from ``--api-key-env``) that are
    redacted wherever they would appear, on top of the pattern-based scrubbing.
    """

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        *,
        force: bool = False,
        secrets: Iterable[str] = (),
        clock: Any = time.time,
    ) -> None:
        self.path = Path(path)
        for key in _REQUIRED:
            if not isinstance(manifest.get(key), (list, tuple)):
                raise InputError(f"{self.path / layout.MANIFEST}: {key}: expected a list of names")
        self._prepare_directory(force)
        self._scrub = Scrubber(secrets)
        self._clock = clock
        started = float(manifest.get("started_epoch") or clock())
        self.manifest: dict[str, Any] = self._scrub.data(dict(manifest))
        self.manifest.update(
            format=layout.FORMAT,
            status="running",
            started_epoch=started,
            started_at=datetime.fromtimestamp(started, tz=timezone.utc).isoformat(),
            interval_s=float(manifest.get("interval_s", 1.0)),
            warmup_s=float(manifest.get("warmup_s", 0.0)),
            variants=list(manifest["variants"]),
            classes=list(manifest["classes"]),
        )
        write_json_atomic(self.path / layout.MANIFEST, self.manifest)
        (self.path / layout.LOGS).mkdir(exist_ok=True)
        self._requests = self._open(layout.REQUESTS)
        self._samples = self._open(layout.SAMPLES)
        self._events = self._open(layout.EVENTS)
        self._hlog_lines = HlogWriter(self.path / layout.INTERVALS, start_time_epoch_s=started)
        self._hlog = self._open(layout.INTERVALS)  # the same file, for closed-interval markers
        self._written: dict[int, set[str]] = {}  # tags written per interval not yet marked closed
        self._last_closed = -1
        self._max_t = 0.0
        self._closed = False

    def _prepare_directory(self, force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise InputError(f"{path}: exists and is not a directory; choose another recording path")
        if path.is_dir() and any(path.iterdir()):
            if not (path / layout.MANIFEST).exists():
                raise InputError(f"{path}: directory is not empty and is not a recording; refusing to overwrite it")
            if not force:
                raise InputError(f"{path}: a recording already exists there; pass --force to overwrite it")
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)

    def _open(self, name: str) -> IO[str]:
        return open(self.path / name, "a", encoding="utf-8")

    def _line(self, fh: IO[str], data: Any) -> None:
        fh.write(self._scrub.text(_dumps(data)) + "\n")

    def write_records(self, records: Iterable[RequestRecord]) -> None:
        """orjson encodes the dataclass as it is (``asdict`` would deep-copy every list first)."""
        for record in records:
            for t in (record.done, record.last_token, record.first_token, record.sent):
                if t is not None:
                    self._max_t = max(self._max_t, t)
                    break
            line = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()
            self._requests.write(self._scrub.text(line) + "\n")

    def write_samples(self, samples: Iterable[ServerSample]) -> None:
        for sample in samples:
            self._line(self._samples, sample.to_dict())

    def write_events(self, events: Iterable[Event]) -> None:
        for event in events:
            data = event.to_dict()
            data["data"] = self._scrub.data(data.get("data") or {})
            self._line(self._events, data)

    def mark_saturated(self, interval_index: int, t: float, reason: str = "") -> None:
        """Keep a saturated-client interval in the timeline (the live aggregator's ``mark_saturated``)."""
        message = f"load generator could not keep up in interval {interval_index}"
        self.write_events(
            [Event(t=t, kind=layout.SATURATED_EVENT, message=message + (f": {reason}" if reason else ""),
                   data={"interval": interval_index})]
        )

    def write_interval(self, index: int, start_s: float, end_s: float, tag: str, hist: HistogramLike) -> None:
        """An interval already marked closed is sealed: nothing more is written for it."""
        if index <= self._last_closed or tag in self._written.get(index, ()) or not hist.count:
            return
        self._written.setdefault(index, set()).add(tag)
        self._hlog_lines.write(tag, start_s, end_s - start_s, hist)  # type: ignore[arg-type]

    def write_closed_intervals(self, aggregator: ClosedIntervals) -> int:
        """Append intervals the aggregator closed since the last call, then ``flush`` with a marker.

        Call it after each ``aggregator.tick`` (and once after the final snapshot); returns the
        last closed interval index (-1 while none is closed).
        """
        last = aggregator.last_closed_interval
        if last <= self._last_closed:
            # Nothing closed since the last call (it runs at the snapshot rate, 4 a second): hand what
            # was written to the OS, which a crash of this process does not lose, and leave the fsyncs
            # (the costly part) to the interval's close, as the format promises.
            for fh in (self._requests, self._samples, self._events, self._hlog):
                fh.flush()
            return last
        end_s: float | None = None
        for index, start_s, interval_end, tag, hist in aggregator.iter_closed_intervals(since=self._last_closed):
            self.write_interval(index, start_s, interval_end, tag, hist)
            if index == last:
                end_s = interval_end
        self.flush(closed_interval=last if last >= 0 else None, end_s=end_s)
        return last

    def copy_log(self, variant: str, path: Path) -> Path | None:
        """Copy a server log into logs/ with secrets scrubbed; a missing log is skipped."""
        source = Path(path)
        if not source.is_file():
            return None
        target = self.path / layout.log_file(variant)
        with open(source, encoding="utf-8", errors="replace") as src, open(target, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(self._scrub.text(line))
        return target

    def flush(self, closed_interval: int | None = None, end_s: float | None = None) -> None:
        """Make everything written so far durable; with ``closed_interval``, mark that interval complete."""
        for fh in (self._requests, self._samples, self._events):
            fh.flush()
            os.fsync(fh.fileno())
        if closed_interval is not None and closed_interval > self._last_closed:
            interval_s = self.manifest["interval_s"]
            end = end_s if end_s is not None else (closed_interval + 1) * interval_s
            self._hlog.write(layout.closed_mark(closed_interval, end))
            self._last_closed = closed_interval
            for sealed in [i for i in self._written if i <= closed_interval]:
                del self._written[sealed]
            self._max_t = max(self._max_t, end)
        self._hlog.flush()
        os.fsync(self._hlog.fileno())

    def close(self, final: dict[str, Any] | None = None, *, end_s: float | None = None) -> None:
        """Finish the recording: status (``final["status"]``, default "complete"), end time, final facts.

        ``end_s`` is the run time of the final snapshot; replay uses it so rates match the live report.
        """
        if self._closed:
            return
        self.flush()
        final = dict(final or {})
        end = float(end_s if end_s is not None else final.pop("end_s", self._max_t))
        self.manifest.update(
            status=str(final.pop("status", "complete")),
            end_s=end,
            ended_at=datetime.fromtimestamp(self._clock(), tz=timezone.utc).isoformat(),
            last_closed_interval=self._last_closed,
        )
        if final:
            self.manifest["final"] = self._scrub.data(final)
        for fh in (self._requests, self._samples, self._events, self._hlog):
            fh.close()
        self._hlog_lines.close()
        write_json_atomic(self.path / layout.MANIFEST, self.manifest)
        self._closed = True

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close({"status": "interrupted"} if exc_type is not None else None)
