"""Reads and validates a recording directory; tolerates what a crash leaves behind.

A truncated last line in any file is dropped with a warning in ``Recording.warnings``. A recording
whose manifest never reached "complete" status is trusted only up to its last closed interval
(the writer's marker in ``intervals.hlog``): later records, samples and events are dropped from
the replay views, and the count of dropped records is reported as a warning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from speclab.metrics.cells import finish_time
from speclab.metrics.hdr import LatencyHistogram
from speclab.metrics.hlog import parse_tag
from speclab.model.errors import InputError
from speclab.model.records import Event, RequestRecord, ServerSample

from . import layout

T = TypeVar("T")
COUNTED_METRIC = "e2e"  # recorded once per answered request after the warm-up: the histograms' request count

__all__ = ["IntervalHistogram", "ManifestModel", "Recording", "finish_time", "read_recording"]


class ManifestModel(BaseModel):
    """The fields replay depends on; everything else in the manifest is kept as written."""

    model_config = ConfigDict(extra="allow")

    format: str = layout.FORMAT
    status: str = "running"
    variants: list[str] = Field(min_length=1)
    classes: list[str] = Field(min_length=1)
    interval_s: float = Field(default=1.0, gt=0)
    warmup_s: float = Field(default=0.0, ge=0)
    simulated: bool = True
    lab: str = ""
    scenario: str = ""
    started_epoch: float = 0.0
    end_s: float | None = Field(default=None, ge=0)


@dataclass(frozen=True, slots=True)
class IntervalHistogram:
    index: int
    start_s: float
    end_s: float
    tag: str
    metric: str
    prompt_class: str
    variant: str
    encoded: str
    epoch: int = 1

    def histogram(self) -> LatencyHistogram:
        return LatencyHistogram.decode(self.encoded)


@dataclass(slots=True)
class Recording:
    path: Path
    manifest: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)
    samples: list[ServerSample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    intervals: list[IntervalHistogram] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    last_closed_interval: int | None = None
    complete: bool = False

    @classmethod
    def open(cls, path: str | Path) -> Recording:
        return read_recording(Path(path))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def variants(self) -> list[str]:
        return list(self.manifest["variants"])

    @property
    def classes(self) -> list[str]:
        return list(self.manifest["classes"])

    @property
    def interval_s(self) -> float:
        return float(self.manifest["interval_s"])

    @property
    def warmup_s(self) -> float:
        return float(self.manifest.get("warmup_s", 0.0))

    @property
    def simulated(self) -> bool:
        return bool(self.manifest.get("simulated", True))

    @property
    def end_time(self) -> float:
        """The replayable end: the recorded end of a complete run, else the end of the last closed interval."""
        if self.complete and self.manifest.get("end_s") is not None:
            return float(self.manifest["end_s"])
        if self.last_closed_interval is not None:
            return (self.last_closed_interval + 1) * self.interval_s
        return 0.0 if not self.complete else max((finish_time(r) for r in self.records), default=0.0)

    @property
    def duration(self) -> float:
        return self.end_time

    def histograms(self, metric: str, prompt_class: str | None = None, variant: str | None = None,
                   start: int = 0, end: int | None = None, epoch: int | None = None) -> LatencyHistogram:
        """The recorded interval histograms of one metric merged over [start, end] intervals
        (of one config epoch when ``epoch`` is given)."""
        out = LatencyHistogram()
        for item in self.intervals:
            if item.metric != metric or item.index < start or (end is not None and item.index > end):
                continue
            if epoch is not None and item.epoch != epoch:
                continue
            if (prompt_class is None or item.prompt_class == prompt_class) and (
                variant is None or item.variant == variant
            ):
                out.merge(item.histogram())
        return out


def _lines(path: Path, encoding: str) -> list[str]:
    """The file's lines; a recording file that cannot be read (a directory in its place, no
    permission) is bad input, in one line."""
    try:
        with open(path, encoding=encoding, errors="replace") as fh:
            return fh.readlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read this recording file: {exc.strerror or exc}") from None


def _read_lines(path: Path, warnings: list[str], parse: Callable[[str], T]) -> Iterator[T]:
    """Parsed lines; a truncated or unparsable *last* line warns, any other bad line is an error."""
    if not path.exists():
        warnings.append(f"{path}: missing; treated as empty")
        return
    lines = _lines(path, "utf-8")
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        if not line.strip():
            continue
        try:
            if last and not line.endswith("\n"):
                raise ValueError("no line end")
            yield parse(line)
        except (ValueError, KeyError, TypeError) as exc:
            if last:
                warnings.append(f"{path}: line {number} is truncated (an interrupted write); ignored")
                return
            raise InputError(f"{path}: line {number}: not a valid entry ({exc})") from None


def _json_line(line: str) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def _read_manifest(path: Path) -> dict[str, Any]:
    manifest_path = path / layout.MANIFEST
    if not path.is_dir():
        raise InputError(f"{path}: no such recording directory")
    if not manifest_path.is_file():
        raise InputError(f"{manifest_path}: missing; {path} is not a speclab recording")
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{manifest_path}: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{manifest_path}: expected a JSON object")
    try:
        model = ManifestModel.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg'].lower()}" for err in exc.errors()
        )
        raise InputError(f"{manifest_path}: {problems}") from None
    if not model.format.startswith("speclab-recording/"):
        raise InputError(f"{manifest_path}: format: expected '{layout.FORMAT}', got {model.format!r}")
    return {**raw, **model.model_dump(include=set(ManifestModel.model_fields))}


def _read_hlog(
    path: Path, interval_s: float, warnings: list[str]
) -> tuple[list[IntervalHistogram], int | None]:
    """Tagged interval lines and the last closed-interval marker (lines after it are kept, flagged open)."""
    out: list[IntervalHistogram] = []
    last_closed: int | None = None
    if not path.exists():
        warnings.append(f"{path}: missing; no interval histograms")
        return out, None
    lines = _lines(path, "ascii")
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        if line.startswith(layout.CLOSED_MARK):
            if line.endswith("]\n"):
                last_closed = int(line[len(layout.CLOSED_MARK):].split()[0])
            continue
        if not line.startswith("Tag="):
            continue
        try:
            if last and not line.endswith("\n"):
                raise ValueError("no line end")
            tag, start, length, _max, payload = line[4:].rstrip("\n").split(",", 4)
            start_s, length_s = float(start), float(length)
            if not payload.startswith("HIST"):
                raise ValueError("no compressed histogram")
            metric, prompt_class, variant, epoch = parse_tag(tag)
        except (ValueError, InputError) as exc:
            if last:
                warnings.append(f"{path}: line {number} is truncated (an interrupted write); ignored")
                break
            raise InputError(f"{path}: line {number}: not a valid interval histogram ({exc})") from None
        index = math.floor(start_s / interval_s + 1e-6)
        out.append(IntervalHistogram(index, start_s, start_s + length_s, tag, metric, prompt_class, variant, payload,
                                     epoch))
    return out, last_closed


def _records_missing(path: Path, records: list[RequestRecord], intervals: list[IntervalHistogram]) -> list[str]:
    """A warning per variant whose interval histograms measured more answered requests than
    ``requests.jsonl`` holds after the warm-up: every measured request was written to both, so
    records were lost (an emptied, cut or replaced file). A transition's requests are in no
    histogram, so fewer is normal."""
    measured: dict[str, int] = {}
    for interval in intervals:
        if interval.metric == COUNTED_METRIC:
            measured[interval.variant] = measured.get(interval.variant, 0) + interval.histogram().count
    answered: dict[str, int] = {}
    for record in records:
        if record.ok and not record.warmup:
            answered[record.variant] = answered.get(record.variant, 0) + 1
    return [f"{path / layout.REQUESTS}: {answered.get(variant, 0)} answered request record(s) of {variant}, but "
            f"{path / layout.INTERVALS} measured {count}: {count - answered.get(variant, 0)} record(s) are missing"
            for variant, count in sorted(measured.items()) if count > answered.get(variant, 0)]


def read_recording(path: Path) -> Recording:
    manifest = _read_manifest(path)
    warnings: list[str] = []
    recording = Recording(path=path, manifest=manifest, warnings=warnings)
    recording.complete = manifest.get("status") in ("complete", "interrupted", "failed", "stopped")  # "stopped": q
    intervals, last_closed = _read_hlog(path / layout.INTERVALS, float(manifest["interval_s"]), warnings)
    recording.last_closed_interval = last_closed
    records = list(_read_lines(path / layout.REQUESTS, warnings, lambda s: RequestRecord.from_dict(_json_line(s))))
    samples = list(_read_lines(path / layout.SAMPLES, warnings, lambda s: ServerSample.from_dict(_json_line(s))))
    events = list(_read_lines(path / layout.EVENTS, warnings, lambda s: Event.from_dict(_json_line(s))))
    if not recording.complete:
        end = recording.end_time
        kept = [r for r in records if finish_time(r) < end]
        dropped = len(records) - len(kept)
        where = (f"interval {last_closed} (t={end:g} s)" if last_closed is not None else "the start (no interval closed)")
        warnings.append(
            f"{path}: recording did not finish (status {manifest.get('status')!r}); replaying up to the end of "
            f"{where}, {dropped} later request record(s) dropped"
        )
        records = kept
        samples = [s for s in samples if s.t < end]
        events = [e for e in events if e.t < end]
        intervals = [i for i in intervals if last_closed is not None and i.index <= last_closed]
    warnings.extend(_records_missing(path, records, intervals))
    recording.records = sorted(records, key=finish_time)
    recording.samples = sorted(samples, key=lambda s: s.t)
    recording.events = sorted(events, key=lambda e: e.t)
    recording.intervals = intervals
    return recording
