"""The live controls of a run (``LiveControls`` less the relaunch): pause, resume, rate and
concurrency, each applied to the traffic runner and written down as an event on the run's timeline."""

from __future__ import annotations

from collections.abc import Callable

from speclab.model.records import Event
from speclab.traffic.runner import TrafficRunner


class TrafficControls:
    """``runner`` is read on every call: a control used before traffic starts only records its event.
    ``rate_to_wall`` turns a modelled rate into the workers' wall-clock one (the time scale)."""

    def __init__(self, runner: Callable[[], TrafficRunner | None], add_event: Callable[[Event], None],
                 now: Callable[[], float], rate_to_wall: Callable[[float], float] = float) -> None:
        self._runner = runner
        self._rate_to_wall = rate_to_wall
        self._add_event = add_event
        self._now = now
        self.paused = False

    async def pause(self) -> None:
        runner = self._runner()
        if runner is not None:
            await runner.pause()
        self.paused = True
        self._add_event(Event(t=self._now(), kind="pause", message="traffic paused"))

    async def resume(self) -> None:
        runner = self._runner()
        if runner is not None:
            await runner.resume()
        self.paused = False
        self._add_event(Event(t=self._now(), kind="resume", message="traffic resumed"))

    async def set_rate(self, rate: float) -> None:
        runner = self._runner()
        if runner is not None:
            await runner.set_rate(self._rate_to_wall(rate))  # the user's rate is modelled
        self._add_event(Event(t=self._now(), kind="config_change", message=f"rate -> {rate:g} req/s",
                              data={"rate": rate}))

    async def set_concurrency(self, concurrency: int) -> None:
        runner = self._runner()
        if runner is not None:
            await runner.set_concurrency(concurrency)
        self._add_event(Event(t=self._now(), kind="config_change", message=f"concurrency -> {concurrency}",
                              data={"concurrency": concurrency}))
