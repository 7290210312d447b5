"""The live session is handed its collaborators: what a caller passes is what the run uses."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from speclab.metrics.crosscheck import SpecTotals
from speclab.model.errors import InputError
from speclab.model.records import Event, ServerSample
from speclab.model.snapshot import Snapshot
from speclab.session.live import LiveSession
from speclab.session.live_parts import Collaborators, resolve_inputs
from speclab.session.options import RunOptions


@dataclass
class _Collector:
    seen: list[Snapshot] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    time_scale: float | None = None

    def update(self, snapshot: Snapshot) -> None:
        self.seen.append(snapshot)

    def set_time_scale(self, scale: float) -> None:
        self.time_scale = scale

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
    assert endpoint.collector.time_scale == session.time_scale.s  # its rates are per modelled second
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


class _HeldScraper:
    """A scraper whose first read is held until the run has begun to finish (the CI race)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.reads = 0

    async def scrape(self, http: object, t: float) -> ServerSample:
        self.reads += 1
        if self.reads == 1:
            self.entered.set()
            await self.release.wait()
            return ServerSample(t=t, variant="k4", spec_drafts=10, spec_draft_tokens=40, spec_accepted=25)
        return ServerSample(t=t, variant="k4", spec_drafts=5, spec_draft_tokens=20, spec_accepted=12)


def _held_session(monkeypatch: pytest.MonkeyPatch) -> tuple[LiveSession, _HeldScraper]:
    """A session whose one server is read by ``_HeldScraper`` and whose scrape loop never waits."""
    session = LiveSession(RunOptions(scenario="smoke", lab="default", engine="sim", requests=4))
    scraper = _HeldScraper()
    session.scrapers = {"k4": scraper}  # type: ignore[dict-item]
    session.http = None  # type: ignore[assignment]

    async def no_wait(modelled_s: float) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(session, "sleep", no_wait)
    return session, scraper


async def test_a_scrape_on_its_way_when_the_run_ends_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Scrapes are deltas from the previous read: the loop's read that the end overtook used to be
    # dropped, and the cross-check then found the servers ~20% short after a Ctrl-C (a CI failure).
    session, scraper = _held_session(monkeypatch)
    loop = asyncio.create_task(session._scrape_loop())
    await scraper.entered.wait()
    finish = asyncio.create_task(session._finish())
    while not session._finishing:
        await asyncio.sleep(0)
    scraper.release.set()
    await finish
    await loop
    assert scraper.reads == 2
    assert SpecTotals.from_samples(session.samples) == SpecTotals(drafts=15, draft_tokens=60, accepted=37)


async def test_a_relaunch_read_waits_for_the_read_on_its_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two reads of one server at once could be parsed out of order: a counter would seem to go down.
    session, scraper = _held_session(monkeypatch)
    loop = asyncio.create_task(session._scrape_loop())
    await scraper.entered.wait()
    relaunch = asyncio.create_task(session.scrape_once("k4"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert scraper.reads == 1  # held behind the loop's read
    session._finishing = True
    scraper.release.set()
    await relaunch
    await loop
    assert scraper.reads == 2 and [s.spec_drafts for s in session.samples] == [10, 5]


def test_two_attached_servers_under_one_label_are_bad_input() -> None:
    options = RunOptions(scenario="smoke", attach=("a=http://127.0.0.1:1", "a=http://127.0.0.1:2"))
    with pytest.raises(InputError, match="--attach: label a given twice"):
        resolve_inputs(options)
