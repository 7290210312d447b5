from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import pytest

from speclab.model.snapshot import ALL_CLASSES
from speclab.recording import Recording, ReplaySource, replay_final_snapshot
from speclab.recording.reader import finish_time
from speclab.recording.replay import ReplayFeeder
from speclab.session.api import SnapshotSource
from speclab.ui.replay import ReplayControls

from . import synth
from .live_run import END_S, record_live


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    path = tmp_path_factory.mktemp("rec") / "run"
    final = record_live(path)
    return path, final


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_replay_report_equals_live_final_numbers(recorded: tuple[Path, object]) -> None:
    path, live = recorded
    rec = Recording.open(path)
    assert rec.complete and rec.warnings == []
    replayed = replay_final_snapshot(rec)
    assert replayed.finished and replayed.t == END_S
    assert replayed.cumulative == live.cumulative  # type: ignore[attr-defined]
    # Interval 4 was saturated: it and the intervals where the requests sent in it finished are flagged.
    affected = {4} | {math.floor(finish_time(r)) for r in rec.records if r.sent is not None and 4 <= r.sent < 5}
    assert replayed.saturated_intervals == live.saturated_intervals == tuple(sorted(affected))  # type: ignore[attr-defined]
    assert len(affected) > 1
    assert replayed.health == live.health and replayed.health.cpu_percent == 4.0  # type: ignore[attr-defined]
    assert [e.kind for e in replayed.events] == ["config_change"]  # the whole run's events, saturation aside
    k2 = replayed.cumulative["k2"].classes
    assert k2["qa"].acceptance.steps > 0 and k2[ALL_CLASSES].acceptance.accepted == sum(
        k2[c].acceptance.accepted for c in synth.CLASSES
    )
    assert k2["tool"].structured_total > 0 and k2["tool"].errors


async def test_replay_source_play_pause_speed_seek_on_fake_clock(recorded: tuple[Path, object]) -> None:
    rec = Recording.open(recorded[0])
    clock = FakeClock()
    source = ReplaySource(rec, clock=clock)
    assert isinstance(source, SnapshotSource) and isinstance(source, ReplayControls) and source.info.replay
    assert source.duration == END_S
    clock.now += 2.0
    assert source.frame().t == pytest.approx(2.0)
    await source.set_speed(4)
    assert source.speed == 4
    clock.now += 1.0
    assert source.position == pytest.approx(6.0)
    await source.pause()
    clock.now += 5.0
    paused = source.frame()
    assert paused.t == pytest.approx(6.0) and paused.paused and not paused.finished
    # Seeking backwards rebuilds: the numbers equal a fresh feed up to the same time.
    await source.seek(3.0)
    at = source.position
    snap = source.frame()
    fresh = ReplayFeeder(rec).advance(at).snapshot(at)
    assert snap.cumulative == fresh.cumulative
    expected = sum(1 for r in rec.records if finish_time(r) <= 3.0 and r.ok and not r.warmup and r.variant == "k2")
    assert snap.cumulative["k2"].total.requests == expected
    await source.set_speed(100)
    assert source.speed == 16
    await source.set_speed(0.01)
    assert source.speed == 0.25
    await source.set_speed(16)
    await source.play()
    clock.now += 10.0
    end = source.frame()
    assert end.finished and end.t == END_S and not source.playing
    assert end.cumulative == replay_final_snapshot(rec).cumulative
    await source.play()  # play at the end starts over
    assert source.position == 0.0


async def test_snapshot_stream_at_4hz_of_replay_time(recorded: tuple[Path, object]) -> None:
    rec = Recording.open(recorded[0])
    clock = FakeClock()

    async def fake_sleep(dt: float) -> None:
        clock.now += dt
        await asyncio.sleep(0)

    source = ReplaySource(rec, clock=clock, sleep=fake_sleep, speed=2.0, hold_at_end=False)
    times = [snap.t async for snap in source.snapshots()]
    assert times[0] == 0.0 and times[-1] == END_S
    steps = [b - a for a, b in itertools.pairwise(times)]
    assert all(step == pytest.approx(0.5) for step in steps[:-1])  # 0.25 s of wall time at 2x


async def test_stream_holds_at_end_until_seek_or_stop(recorded: tuple[Path, object]) -> None:
    rec = Recording.open(recorded[0])
    clock = FakeClock()

    async def fake_sleep(dt: float) -> None:
        clock.now += dt
        await asyncio.sleep(0)

    source = ReplaySource(rec, clock=clock, sleep=fake_sleep, speed=16.0)
    seen = []
    async for snap in source.snapshots():
        seen.append(snap)
        if snap.finished and len([s for s in seen if s.finished]) == 1:
            await source.seek(1.0)
            await source.pause()
        elif len(seen) > 3 and seen[-2].finished:
            await source.stop()
    assert [s.finished for s in seen].count(True) == 1
    assert seen[-1].t == 1.0 and seen[-1].paused


async def test_replay_at_16x_through_the_app_state_loses_no_interval_even_across_seeks(
    recorded: tuple[Path, object],
) -> None:
    """At 16× a 4 Hz snapshot closes four intervals; every one reaches the time series, as do all
    events; seeking back starts the series over, and seeking forward skips no interval."""
    from speclab.recording.replay import replay_final
    from speclab.ui.state import LabState

    rec = Recording.open(recorded[0])
    clock = FakeClock()

    async def fake_sleep(dt: float) -> None:
        clock.now += dt
        await asyncio.sleep(0)

    source = ReplaySource(rec, clock=clock, sleep=fake_sleep, speed=16.0)
    state = LabState(source.info)
    seeks = {2: 1.5, 3: 9.0}  # after the 2nd snapshot: back; after the 3rd: a long jump forward
    seen, rebuilt, widest = 0, 0, 0
    async for snap in source.snapshots():
        seen += 1
        rebuilt += snap.rebuilt
        widest = max(widest, len(snap.intervals))
        state.ingest(snap)
        if seen in seeks:
            await source.pause()
            await source.seek(seeks[seen])
        elif not source.playing and not snap.finished:
            await source.play()
        if snap.finished:
            await source.stop()
    assert seen >= 4 and rebuilt == 2 and widest >= 7
    final, aggregator = replay_final(rec)
    last = aggregator.last_closed_interval
    assert state.last_interval == last == final.interval
    for variant in synth.VARIANTS:
        points = list(state.history[variant])
        assert [p.interval for p in points] == list(range(last + 1)), variant
        for point in points:
            stored = aggregator.window(point.interval, point.interval)[variant].total
            assert point.requests_per_s == pytest.approx(stored.requests_per_s), (variant, point.interval)
            assert point.errors == stored.error_count
    assert [e.kind for _, e in state.events] == [e.kind for e in final.events]


def test_a_slow_subscriber_gets_coalesced_snapshots_that_lose_no_interval_or_event() -> None:
    from speclab.model.records import Event
    from speclab.model.snapshot import IntervalStats, Snapshot
    from speclab.session.snapshot_bus import publish

    queue: asyncio.Queue[Snapshot] = asyncio.Queue()
    for i in range(30):
        publish(queue, Snapshot(t=i + 1.0, interval=i, intervals=(IntervalStats(i, float(i), i + 1.0),),
                                events=(Event(t=i + 0.5, kind="warning", message=str(i)),), rebuilt=i == 0),
                limit=8)
    got = [queue.get_nowait() for _ in range(queue.qsize())]
    assert len(got) <= 9 and got[-1].t == 30.0 and got[0].rebuilt
    assert [iv.index for s in got for iv in s.intervals] == list(range(30))
    assert [e.message for s in got for e in s.events] == [str(i) for i in range(30)]
