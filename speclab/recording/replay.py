"""Replay: a recording re-fed through a fresh metrics Aggregator on its recorded timeline.

``ReplaySource`` is a ``SnapshotSource`` (not ``LiveControls``): the UI cannot tell it from a live
run except by ``info.replay``. It also implements the UI's ``ReplayControls`` protocol for the
replay bar (``create_app(source, replay=source)``): ``await play()``, ``pause()``,
``set_speed(x)`` (``MIN_REPLAY_SPEED``–``MAX_REPLAY_SPEED``, 0.25×–16×), ``seek(t)``, and ``duration``, ``position``, ``playing``, ``speed``. Seeking backwards rebuilds the aggregator from the start; records are sorted by finish
time so each step feeds a bisected slice.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.cells import finish_time
from speclab.model.epochs import TRANSITION_EVENT
from speclab.model.limits import MAX_REPLAY_SPEED, MIN_REPLAY_SPEED
from speclab.model.names import SNAPSHOT_HZ
from speclab.model.snapshot import ClientHealth, Snapshot
from speclab.model.views import ServerView, SessionInfo
from speclab.model.workers import WorkerRow

from . import layout
from .reader import Recording

LOG_TAIL_LINES = 40


class ReplayFeeder:
    """Feeds a recording into an Aggregator up to a position, as the live session fed it.

    The aggregator bins records by finish time and closes intervals on ``tick``, so feeding every
    item up to ``t`` in time order and ticking gives the numbers live had at ``t``.
    """

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._finish = [finish_time(r) for r in recording.records]
        self._sample_t = [s.t for s in recording.samples]
        self._event_t = [e.t for e in recording.events]
        self.reset()

    def reset(self) -> None:
        rec = self.recording
        self.aggregator = Aggregator(
            rec.variants, rec.classes, interval_s=rec.interval_s, simulated=rec.simulated, warmup_s=rec.warmup_s
        )
        for variant, facts in (rec.manifest.get("servers") or {}).items():
            if isinstance(facts, dict):  # the launched settings are epoch 1; relaunch events bring the rest
                self.aggregator.launch(variant, dict(facts.get("settings") or {}), baseline=bool(facts.get("baseline")))
        self.position = 0.0
        self._r = self._s = self._e = 0

    def advance(self, t: float, *, include_rest: bool = False) -> Aggregator:
        """Everything that finished at or before ``t`` fed (everything, with ``include_rest``).

        Long jumps go one interval at a time with a tick after each, so the aggregator closes
        intervals as it goes and reuses their histograms (feeding all at once keeps every
        interval open and costs a fresh histogram per interval, class and metric).
        """
        if t < self.position:
            self.reset()
        interval_s = self.recording.interval_s
        step = (math.floor(self.position / interval_s) + 1) * interval_s
        while step < t:
            self._feed(step)
            self.aggregator.tick(step)
            step += interval_s
        self._feed(math.inf if include_rest else t)
        self.aggregator.tick(t)
        self.position = t
        return self.aggregator

    def _feed(self, limit: float) -> None:
        rec, agg = self.recording, self.aggregator
        s_end = bisect.bisect_right(self._sample_t, limit)
        for sample in rec.samples[self._s : s_end]:
            agg.add_server_sample(sample)
        e_end = bisect.bisect_right(self._event_t, limit)
        for event in rec.events[self._e : e_end]:
            if event.kind == layout.SATURATED_EVENT:  # live marks the interval; it is not an event there
                if isinstance(event.data.get("interval"), int):
                    agg.mark_saturated(event.data["interval"])
                continue
            agg.add_event(event)
        r_end = bisect.bisect_right(self._finish, limit)
        if r_end > self._r:
            agg.add_records(rec.records[self._r : r_end])
        self._r, self._s, self._e = r_end, s_end, e_end


def replay_final_snapshot(recording: Recording) -> Snapshot:
    """The end-of-run snapshot computed at once (``speclab replay NAME --report DIR``): the stream's
    only snapshot, so it carries every interval and every event of the run.

    Client health is not a stream in the recording; a ``close({"health": asdict(ClientHealth)})``
    by the session puts the run's final health in the manifest, and it is restored here.
    """
    return replay_final(recording)[0]


def recorded_final(recording: Recording) -> dict[str, Any]:
    """What the session wrote when it closed the recording (its manifest's ``final``), or ``{}``."""
    final = recording.manifest.get("final")
    return final if isinstance(final, dict) else {}


def traffic_errors(recording: Recording) -> list[str]:
    """What the recorded run's traffic side lost (its report's ``measurement.incomplete``)."""
    return [str(e) for e in (recording.manifest.get("final") or {}).get("traffic_errors") or ()]


def replay_final(recording: Recording) -> tuple[Snapshot, Aggregator]:
    """``replay_final_snapshot`` and the aggregator it came from (the report's timeline reads it)."""
    end = recording.end_time
    aggregator = ReplayFeeder(recording).advance(end, include_rest=recording.complete)
    planned = (recording.manifest.get("final") or {}).get("planned")
    if isinstance(planned, list):  # what the live run's workers began, so the accounting matches
        aggregator.set_planned({(str(v), int(e)): int(n) for v, e, n in planned})
    health = (recording.manifest.get("final") or {}).get("health")
    if isinstance(health, dict):
        known = {f.name for f in fields(ClientHealth)}
        # The run's health, restored; the intervals it flagged were marked from the recording's events.
        aggregator.set_health(ClientHealth(**{k: v for k, v in health.items() if k in known}), mark=False)
    return replace(aggregator.snapshot(end, finished=True), workers=recorded_workers(recording)), aggregator


def recorded_workers(recording: Recording) -> tuple[WorkerRow, ...]:
    """Each traffic worker's health over the recorded run, as the session closed the recording
    (the run's figures only: a recording keeps no per-worker interval)."""
    rows = recorded_final(recording).get("workers")
    return tuple(WorkerRow.from_report(r) for r in rows if isinstance(r, dict)) if isinstance(rows, list) else ()


def session_info(recording: Recording) -> SessionInfo:
    m = recording.manifest
    return SessionInfo(
        lab=str(m.get("lab", "")),
        scenario=str(m.get("scenario", "")),
        variants=tuple(recording.variants),
        classes=tuple(recording.classes),
        simulated=recording.simulated,
        pair={str(k): str(v) for k, v in (m.get("pair") or {}).items()},
        arrival=dict(m.get("arrival") or {}),
        replay=True,
        time_scale=float(m.get("time_scale") or 1.0),
    )


def _log_tail(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        return ()
    with open(path, encoding="utf-8", errors="replace") as fh:
        return tuple(line.rstrip("\n") for line in fh.readlines()[-LOG_TAIL_LINES:])


def server_views(recording: Recording) -> dict[str, ServerView]:
    """The servers running at the end, with log tails: as launched (``manifest["servers"][variant]``)
    unless a relaunch was requested, and then only what the closing facts (``final.servers``) say of
    the server that replaced it, so no fact of the launched server (its memory) sits beside them."""
    described = recording.manifest.get("servers") or {}
    at_end = (recording.manifest.get("final") or {}).get("servers") or {}  # after any relaunch
    relaunched = {e.variant for e in recording.events if e.kind == TRANSITION_EVENT}
    out: dict[str, ServerView] = {}
    for variant in recording.variants:
        launched = described.get(variant) or {}
        if variant in relaunched:  # what a relaunch keeps; command, settings, memory were the launched server's
            launched = {k: v for k, v in launched.items() if k in ("engine", "baseline")}
        facts = {**launched, **(at_end.get(variant) or {})}
        out[variant] = ServerView(
            variant=variant,
            status="stopped",
            command=str(facts.get("command", "")),
            base_url=str(facts.get("base_url", "")),
            engine=str(facts.get("engine", "sim" if recording.simulated else "vllm")),
            settings=dict(facts.get("settings") or {}),
            memory={k: float(v) for k, v in (facts.get("memory") or {}).items() if isinstance(v, (int, float))},
            log_tail=_log_tail(recording.path / layout.log_file(variant)),
            baseline=bool(facts.get("baseline", False)),
        )
    return out


class ReplaySource:
    """Snapshots at 4 Hz of replay time with play/pause, speed and seek (the replay bar's hooks).

    With ``hold_at_end`` (the default, for the app) the stream stays open after the finished
    snapshot so a seek can resume it; it ends on ``stop()``. Without it the stream ends there.
    ``clock`` and ``sleep`` are injectable for tests on a fake clock.
    """

    def __init__(
        self,
        recording: Recording,
        *,
        speed: float = 1.0,
        playing: bool = True,
        hold_at_end: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        hz: float = SNAPSHOT_HZ,
    ) -> None:
        self.recording = recording
        self.info = session_info(recording)
        self.hold_at_end = hold_at_end
        self._feeder = ReplayFeeder(recording)
        self._clock = clock
        self._sleep = sleep
        self._period = 1.0 / hz
        self._speed = _clamp_speed(speed)
        self._pos = 0.0
        self._anchor = clock()
        self._playing = playing
        self._stopped = False
        self._wake: asyncio.Event | None = None
        self._servers = server_views(recording)
        self._workers = recorded_workers(recording)

    @property
    def duration(self) -> float:
        return self.recording.end_time

    @property
    def position(self) -> float:
        if not self._playing:
            return self._pos
        return min(self.duration, self._pos + (self._clock() - self._anchor) * self._speed)

    @property
    def playing(self) -> bool:
        return self._playing and self.position < self.duration

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def finished(self) -> bool:
        return self.position >= self.duration

    def _settle(self) -> None:
        self._pos = self.position
        self._anchor = self._clock()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def play(self) -> None:
        """Resume playback (from the start when at the end)."""
        self._settle()
        if self._pos >= self.duration:
            self._pos = 0.0
        self._playing = True
        self._poke()

    async def pause(self) -> None:
        self._settle()
        self._playing = False
        self._poke()

    async def set_speed(self, speed: float) -> None:
        """Playback speed relative to recorded time, clamped to the replay range (0.25×–16×)."""
        self._settle()
        self._speed = _clamp_speed(speed)
        self._poke()

    async def seek(self, t: float) -> None:
        """Jump to ``t`` seconds of recorded time (clamped to the recording); backwards rebuilds."""
        self._settle()
        self._pos = min(max(0.0, float(t)), self.duration)
        self._poke()

    def frame(self) -> Snapshot:
        """The snapshot at the current position (feeding or rebuilding the aggregator as needed)."""
        position = self.position
        finished = position >= self.duration
        if finished and self._playing:
            self._pos, self._playing = self.duration, False
        aggregator = self._feeder.advance(position, include_rest=finished and self.recording.complete)
        return replace(aggregator.snapshot(position, paused=not self._playing and not finished, finished=finished),
                       workers=self._workers)

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        self._wake = asyncio.Event()
        shown: tuple[float, bool] | None = None
        while not self._stopped:
            state = (self.position, self._playing)
            if state != shown:
                snapshot = self.frame()
                shown = (snapshot.t, self._playing)
                yield snapshot
                if snapshot.finished and not self.hold_at_end:
                    return
            await self._wait()

    async def _wait(self) -> None:
        assert self._wake is not None
        self._wake.clear()
        sleeper = asyncio.ensure_future(self._sleep(self._period))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                if not task.done():
                    task.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)

    def servers(self) -> dict[str, ServerView]:
        return self._servers

    async def stop(self) -> None:
        self._stopped = True
        self._poke()


def _clamp_speed(speed: float) -> float:
    return min(MAX_REPLAY_SPEED, max(MIN_REPLAY_SPEED, float(speed)))
