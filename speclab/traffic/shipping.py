"""What a traffic worker ships to the parent, and in what form: the one interface between them.

A worker is anything that runs a ``TrafficEngine`` away from the parent (a local process,
``worker.py``, or a runner on another host). The engine emits ``(kind, payload)`` messages; a
worker passes each through ``to_wire`` before it leaves the process and the parent passes each
through ``from_wire`` as it arrives, so records cross as compact JSON lines (cheap to make on the
worker's loop, cheap to pickle) and become ``RequestRecord``s again in one place, ``ingest``.

Per flush (at most ``batch_size`` records or ``flush_s``, 0.1 s) and per 1 s interval a worker emits:

- ``RECORDS``: the records finished since the last flush (on the wire: ``bytes``, one JSON object
  per line, the fields of ``RequestRecord``);
- ``ISSUED``: ``{(variant, epoch): requests begun}`` so far, whenever it changed;
- ``HEALTH``: one ``WorkerHealth`` per 1 s interval of the run clock.

Once each: ``READY`` (worker index; event loop and HTTP session up), ``PHASE_DONE`` (phase index,
sequential runs), ``DONE`` (``EngineSummary``) or ``ERROR`` (one line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

import orjson

from speclab.model.records import RequestRecord, SpecCounts

READY = "ready"
RECORDS = "records"
ISSUED = "issued"
HEALTH = "health"
PHASE_DONE = "phase_done"
DONE = "done"
ERROR = "error"

Message = tuple[str, Any]
Emit = Callable[[Message], None]

_FIELDS = frozenset(f.name for f in fields(RequestRecord))


def encode_record(record: RequestRecord) -> bytes:
    """One record as a JSON line (no newline); orjson encodes the dataclass without copying it."""
    return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)


def encode_records(records: Iterable[RequestRecord]) -> bytes:
    return b"\n".join(encode_record(r) for r in records)


def ingest(blob: bytes) -> list[RequestRecord]:
    """The parent's one entry point for records from a worker: every record goes through here."""
    return [decode_record(line) for line in blob.split(b"\n") if line]


def decode_record(line: bytes) -> RequestRecord:
    data = orjson.loads(line)
    spec = data.get("spec")
    data["spec"] = SpecCounts(**spec) if isinstance(spec, dict) else SpecCounts()
    if not _FIELDS.issuperset(data):
        data = {k: v for k, v in data.items() if k in _FIELDS}
    return RequestRecord(**data)


def to_wire(message: Message) -> Message:
    """A message as it leaves the worker: records as JSON lines, everything else as it is."""
    kind, payload = message
    if kind == RECORDS and isinstance(payload, list):
        return kind, encode_records(payload)
    return message


def from_wire(message: Message) -> Message:
    """A message as the parent uses it: records as ``RequestRecord``s again."""
    kind, payload = message
    if kind == RECORDS and isinstance(payload, bytes):
        return kind, ingest(payload)
    return message
