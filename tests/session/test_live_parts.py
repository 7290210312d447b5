"""The live session is handed its collaborators: what a caller passes is what the run uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from speclab.model.errors import InputError
from speclab.model.records import Event
from speclab.model.snapshot import Snapshot
from speclab.session.live import LiveSession
from speclab.session.live_parts import Collaborators, resolve_inputs
from speclab.session.options import RunOptions


@dataclass
class _Collector:
    seen: list[Snapshot] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)

    def update(self, snapshot: Snapshot) -> None:
        self.seen.append(snapshot)

    def expect_classes(self, classes: list[str]) -> None:
        self.classes.extend(classes)


@dataclass
class _Endpoint:
    collector: _Collector = field(default_factory=_Collector)
    closed: bool = False

    def close(self) -> None:
        self.closed = True


def test_the_clock_and_the_metrics_endpoint_are_the_ones_handed_in() -> None:
    now = [50.0]
    bound: list[tuple[Any, ...]] = []
    endpoint = _Endpoint()

    def metrics(port: int, host: str, run: dict[str, Any]) -> _Endpoint:
        bound.append((port, host, run["lab"]))
        return endpoint

    options = RunOptions(scenario="smoke", lab="default", engine="sim", metrics_port=9999, requests=4)
    session = LiveSession(options, collaborators=Collaborators(clock=lambda: now[0], metrics=metrics))
    assert bound == [(9999, "127.0.0.1", "default")]
    assert endpoint.collector.classes == list(session.classes) != []  # served at zero before any request
    now[0] = 52.5
    assert session.now() == 2.5
    session.add_event(Event(t=session.now(), kind="warning", message="a note"))
    snap = session.aggregator.snapshot(session.now())
    session.bus.publish(snap)
    assert endpoint.collector.seen == [snap]
    session.close_metrics()
    assert endpoint.closed and session.metrics is None


async def test_controls_before_traffic_only_write_their_events() -> None:
    session = LiveSession(RunOptions(scenario="smoke", lab="default", engine="sim", requests=4))
    await session.pause()
    await session.set_rate(3.0)
    assert session.controls.paused
    assert [e.kind for e in session.events] == ["pause", "config_change"]


def test_inputs_are_refused_before_anything_is_built() -> None:
    with pytest.raises(InputError, match="--variants: lab 'default' has no variant nope"):
        resolve_inputs(RunOptions(scenario="smoke", lab="default", engine="sim", variants=("nope",)))
