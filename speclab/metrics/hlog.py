"""HdrHistogram interval logs (``.hlog``) with tags, readable by ``hdrh``'s own ``HistogramLogReader``.

hdrhistogram 0.10.8's writer cannot be used as is: ``output_start_time`` raises, it has no tag
argument and it floor-divides the interval max. So the header, the ``#[StartTime: ...]`` and
``#[BaseTime: ...]`` comments and each ``Tag=metric.class.variant.eN,start,length,max,histogram``
line (N: the config epoch) are written here, appended and flushed one interval at a time so a crash leaves a readable
file. Timestamps are seconds since the run start (relative), the header carries the wall-clock
start; the interval max is written in milliseconds. The reader tolerates a truncated last line
(a crash mid-write): it warns and returns the complete intervals.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from speclab.model.errors import InputError
from speclab.model.names import Metric

from .hdr import EncodedHistogram, LatencyHistogram

LOG_FORMAT_VERSION = "1.3"
_FORBIDDEN = re.compile(r"[\s,=]")
_START_TIME = re.compile(r"#\[StartTime: *([\d.]+)")
_INTERVAL = re.compile(r"^(?:Tag=([^,]*),)?([\d.]+),([\d.]+),([\d.]+),(\S+)$")
_EPOCH = re.compile(r"^e([1-9]\d*)$")


class TruncatedLogWarning(UserWarning):
    """The last line of an ``.hlog`` was cut off; the intervals before it were returned."""


def make_tag(metric: Metric | str, prompt_class: str, variant: str, epoch: int = 1) -> str:
    """``metric.class.variant.eN``; the class may not contain dots, nothing may contain commas or spaces."""
    metric_name = metric.value if isinstance(metric, Metric) else metric
    parts = (metric_name, prompt_class, variant)
    if any(not part or _FORBIDDEN.search(part) for part in parts) or "." in metric_name + prompt_class:
        raise InputError(
            f"histogram tag {'.'.join(parts)!r}: metric, class and variant must be non-empty without "
            "spaces, commas or '=' (and no dots in metric or class)"
        )
    if epoch < 1:
        raise InputError(f"histogram tag {'.'.join(parts)!r}: epoch must be at least 1, got {epoch}")
    return ".".join((*parts, f"e{epoch}"))


def parse_tag(tag: str) -> tuple[str, str, str, int]:
    """(metric, class, variant, epoch); a tag without ``.eN`` (written before epochs) is epoch 1."""
    parts = tag.split(".", 2)
    if len(parts) != 3:
        raise InputError(f"histogram tag {tag!r}: expected metric.class.variant.eN")
    variant, _, last = parts[2].rpartition(".")
    match = _EPOCH.match(last)
    if variant and match:
        return parts[0], parts[1], variant, int(match.group(1))
    return parts[0], parts[1], parts[2], 1


class HlogWriter:
    """Appends tagged interval histograms to an ``.hlog`` file, flushing each line."""

    def __init__(self, path: str | Path, *, start_time_epoch_s: float) -> None:
        self.path = Path(path)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._file: TextIO = self.path.open("a", encoding="utf-8")
        if fresh:
            stamp = datetime.fromtimestamp(start_time_epoch_s, tz=timezone.utc).isoformat(" ")
            self._file.write(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
            self._file.write(f"#[StartTime: {start_time_epoch_s:.3f} (seconds since epoch), {stamp}]\n")
            self._file.write(f"#[BaseTime: {start_time_epoch_s:.3f} (seconds since epoch)]\n")
            self._file.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
            self._file.flush()

    def write(
        self, tag: str, start_s: float, length_s: float, hist: LatencyHistogram | EncodedHistogram
    ) -> None:
        if _FORBIDDEN.search(tag):
            raise InputError(f"histogram tag {tag!r}: no spaces, commas or '=' allowed")
        max_ms = hist.max_us / 1000.0
        self._file.write(f"Tag={tag},{start_s:.3f},{length_s:.3f},{max_ms:.3f},{hist.encode()}\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> HlogWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class HlogInterval:
    tag: str | None
    start_s: float  # relative to the log's start time
    length_s: float
    max_ms: float
    histogram: LatencyHistogram


@dataclass(slots=True)
class HlogContents:
    start_time_epoch_s: float | None = None
    intervals: list[HlogInterval] = field(default_factory=list)
    truncated: bool = False

    def by_tag(self, tag: str) -> Iterator[HlogInterval]:
        return (interval for interval in self.intervals if interval.tag == tag)


def read_hlog(path: str | Path) -> HlogContents:
    """Every interval of an ``.hlog`` (ours or any HdrHistogram writer's), in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read histogram log ({exc.strerror})") from exc
    out = HlogContents()
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()
    for number, line in enumerate(lines, start=1):
        is_last = number == len(lines)
        if line.startswith("#"):
            match = _START_TIME.match(line)
            if match:
                out.start_time_epoch_s = float(match.group(1))
            continue
        if not line.strip() or line.startswith('"'):
            continue
        interval = _parse_interval(line)
        if interval is not None:
            out.intervals.append(interval)
        elif is_last and not complete:
            out.truncated = True
            warnings.warn(
                f"{path}: last line {number} is truncated; read {len(out.intervals)} complete intervals",
                TruncatedLogWarning,
                stacklevel=2,
            )
        else:
            raise InputError(f"{path}:{number}: not an interval histogram line")
    return out


def _parse_interval(line: str) -> HlogInterval | None:
    match = _INTERVAL.match(line)
    if not match:
        return None
    try:
        histogram = LatencyHistogram.decode(match.group(5))
    except Exception:
        return None
    return HlogInterval(
        tag=match.group(1),
        start_s=float(match.group(2)),
        length_s=float(match.group(3)),
        max_ms=float(match.group(4)),
        histogram=histogram,
    )
