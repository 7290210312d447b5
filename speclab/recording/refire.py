"""Refire: the recorded requests, at their recorded intended times, as a plan for another lab.

Each planned request went to every variant with the same prompt, sampling and seed, so the plan
takes one record per plan index (``RequestRecord.prompt["index"]``) and rebuilds the traffic
engine's ``PlannedRequest`` from what the client stored: messages or prompt, endpoint, schema,
sampling exactly as sent. The result has the shape of ``Plan.offsets()``: ``(offset, request)``
pairs sorted by offset, warm-up requests included. Offsets count from the first recorded request
(intended times in a recording also hold the original run's start-up before traffic began; the
schedule puts its first request at offset 0).
``refire_traffic_plan`` wraps the same list as a ``Plan`` that ``TrafficRunner`` fires as is:
an open loop whose unit mass for request ``i`` is its recorded offset at a rate of 1 per second.
A request is warm-up in the refire exactly when it was in the recording, whether the original
warm-up was a duration or a request count, so both runs measure the same requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from speclab.model.errors import InputError
from speclab.model.prompt_ref import reference
from speclab.model.records import RequestRecord
from speclab.traffic.schedule import ClassPlan, Plan, PlannedRequest, Segment

from .prompts import asked, read_prompts
from .reader import Recording


def planned_request(record: RequestRecord, index: int, what: dict[str, Any] | None = None) -> PlannedRequest:
    """``what`` is the resolved prompt (``prompts.asked``); records of older recordings carry it inline."""
    what = what if what is not None else dict(record.prompt)
    endpoint = str(record.prompt.get("endpoint") or ("chat" if "messages" in what else "completions"))
    messages = what.get("messages")
    prompt = what.get("prompt")
    if endpoint == "chat" and messages is None:
        messages = [{"role": "user", "content": prompt or ""}]
    if endpoint == "completions" and prompt is None:
        prompt = "\n\n".join(str(m.get("content", "")) for m in messages or [])
    ref = str(record.prompt.get("ref") or f"{record.prompt_class}/{index}")
    asked = {"messages": what["messages"]} if "messages" in what else {"prompt": what.get("prompt") or ""}
    info = reference(endpoint, index, ref, asked, what.get("schema") is not None)
    return PlannedRequest(
        index=index,
        request_id=f"refire-{index}",
        prompt_class=record.prompt_class,
        endpoint=endpoint,
        messages=messages if endpoint == "chat" else None,
        prompt=prompt if endpoint == "completions" else None,
        sampling=dict(record.sampling),
        schema=what.get("schema"),
        info=info,
    )


def refire_plan(recording: Recording) -> list[tuple[float, PlannedRequest]]:
    """One ``(offset, PlannedRequest)`` per recorded plan position, in send order."""
    return _offsets(_one_record_per_position(recording))


def _offsets(ordered: list[tuple[RequestRecord, dict[str, Any]]]) -> list[tuple[float, PlannedRequest]]:
    origin = ordered[0][0].intended
    return [(r.intended - origin, planned_request(r, r.prompt.get("index", i), what))
            for i, (r, what) in enumerate(ordered)]


def _one_record_per_position(recording: Recording) -> list[tuple[RequestRecord, dict[str, Any]]]:
    table = read_prompts(recording.path)
    chosen: dict[Any, tuple[RequestRecord, dict[str, Any]]] = {}
    missing = 0
    for record in sorted(recording.records, key=lambda r: (r.intended, r.variant)):
        what = asked(record, table)
        if what is None:
            missing += 1
            continue
        key = (record.prompt or {}).get("index", (record.prompt_class, record.intended))
        chosen.setdefault(key, (record, what))
    if not chosen:
        raise InputError(
            f"{recording.path}: the recording stores no prompts ({missing} records without one); it cannot be refired"
        )
    return sorted(chosen.values(), key=lambda pair: pair[0].intended)


class RecordedTimes:
    """Stands in for ``UnitGaps``: the mass of request ``i`` is its recorded offset."""

    def __init__(self, offsets: tuple[float, ...]) -> None:
        self._offsets = offsets

    def mass(self, index: int) -> float:
        return self._offsets[index]


@dataclass
class RefirePlan(Plan):
    """A ``Plan`` that replays recorded requests at their recorded intended offsets (picklable)."""

    recorded: tuple[tuple[float, PlannedRequest], ...] = ()
    recorded_warmup: tuple[bool, ...] = ()

    def request(self, index: int) -> PlannedRequest:
        return self.recorded[index][1]

    def is_warmup(self, index: int, active_t: float) -> bool:
        return self.recorded_warmup[index] if index < len(self.recorded_warmup) else False

    def unit_gaps(self) -> RecordedTimes:  # type: ignore[override]
        return RecordedTimes(tuple(t for t, _ in self.recorded))

    def prompt_items(self) -> Iterator[dict[str, Any]]:
        for _, req in self.recorded:
            asked = {"messages": req.messages} if req.messages is not None else {"prompt": req.prompt}
            yield {"ref": req.info["ref"], "sha256": req.info["sha256"], "class": req.prompt_class,
                   "endpoint": req.endpoint, **asked, "schema": req.schema}


def refire_traffic_plan(recording: Recording, *, stall_timeout_s: float = 30.0,
                        request_timeout_s: float = 600.0) -> RefirePlan:
    """The recorded traffic as a plan for ``TrafficRunner`` (``speclab replay NAME --refire``)."""
    ordered = _one_record_per_position(recording)
    recorded = tuple(_offsets(ordered))
    weights = Counter(req.prompt_class for _, req in recorded)
    endpoints = {req.prompt_class: req.endpoint for _, req in recorded}
    classes = tuple(
        ClassPlan(name=c, weight=float(weights[c]), endpoint=endpoints[c], items=(), sampling={},
                  fixed_seed=None, stochastic=False)
        for c in [*recording.classes, *sorted(set(weights) - set(recording.classes))] if c in weights
    )
    return RefirePlan(
        name=f"refire-{recording.manifest.get('scenario') or recording.name}",
        seed=0,
        mode="open",
        process="recorded",
        classes=classes,
        duration_s=None,
        requests=len(recorded),
        warmup_s=0.0,
        warmup_requests=0,
        stall_timeout_s=stall_timeout_s,
        request_timeout_s=request_timeout_s,
        segments=(Segment(0.0, 1.0),),
        overrides={"refire": str(recording.path)},
        recorded=recorded,
        recorded_warmup=tuple(r.warmup for r, _ in ordered),
    )
