"""The engine loop: one asyncio task that steps the engine and makes real time follow modelled time.

Each step returns its modelled duration; the loop sleeps until the step's modelled end before
handing out its tokens, so a client sees vLLM-like timing. The engine core is an ``EngineClient``
(in this process or in its own); a request that arrives while a step is being computed is handed
to the core once the step is back, as it would be when the step held this loop. When idle, the
modelled clock jumps to real time. When the host cannot keep up, the modelled clock falls behind
real time and the gap is exported as ``speclab_sim_clock_drift_seconds`` rather than hidden.

Under a time scale S (``--sim-time-scale``) one modelled second lasts S wall seconds: ``real()``
is wall time divided by S, so every modelled figure (step ends, drift, per-request metrics) stays
in modelled seconds and only the sleeps are stretched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .api import EngineRequest, RequestOutput, SamplingParams
from .engine_client import EngineClient, EngineCoreDiedError
from .prom import SimMetrics


class EngineDeadError(RuntimeError):
    """The engine raised inside a step; every in-flight request fails, as vLLM's EngineDeadError."""


@dataclass(slots=True)
class Delivery:
    output: RequestOutput | None  # None: the engine died (see RequestStream.error)
    at: float  # modelled time the step ended


@dataclass(slots=True)
class RequestStream:
    request_id: str
    arrival: float
    prompt_tokens: int
    max_tokens: int
    queue: asyncio.Queue[Delivery] = field(default_factory=asyncio.Queue)
    first_at: float | None = None
    last_at: float | None = None
    n_tokens: int = 0
    preemptions: int = 0
    finished: bool = False
    error: str | None = None


class EngineLoop:
    def __init__(self, engine: EngineClient, metrics: SimMetrics,
                 clock: Callable[[], float] = time.monotonic, time_scale: float = 1.0,
                 slow_host: float = 0.0) -> None:
        """``slow_host``: the ``slow_host=F`` fault; each step holds the loop F times its modelled
        length (in wall time, so times S), the way a host too slow to compute it would."""
        if time_scale < 1.0:
            raise ValueError(f"time scale must be >= 1, got {time_scale:g}")
        self.engine = engine
        self.time_scale = time_scale
        self._slow_host = slow_host
        self.metrics = metrics
        self._clock = clock
        self._t0 = clock()
        self._model_now = 0.0
        self._step_end: float | None = None  # set while a step is in flight
        self._streams: dict[str, RequestStream] = {}
        self._wake = asyncio.Event()
        self._engine_free = asyncio.Event()  # clear while a step is being computed
        self._engine_free.set()
        self._stopping = False
        self.dead: str | None = None
        self.drift = 0.0
        self.max_drift = 0.0

    def real(self) -> float:
        """Wall time since start, in modelled seconds (wall seconds divided by the time scale)."""
        return (self._clock() - self._t0) / self.time_scale

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    def arrival_time(self) -> float:
        """A new request's modelled arrival: now, but never after the step the engine is in."""
        if self._step_end is None:
            if not self._engine_free.is_set():  # the step in flight started at _model_now: keep it
                return max(self._model_now, self.real())
            self._model_now = max(self._model_now, self.real())
            return self._model_now
        return min(max(self.real(), self._model_now), self._step_end)

    async def submit(self, request_id: str, prompt_ids: list[int], sampling: SamplingParams,
                     priority: int = 0) -> RequestStream:
        """Hand a request to the engine; raises what the engine raises for one it refuses."""
        while not self._engine_free.is_set():  # set again and cleared by the next step: wait for that one too
            await self._engine_free.wait()
        if self.dead is not None:
            raise EngineDeadError(self.dead)
        arrival = self.arrival_time()
        stream = RequestStream(request_id, arrival, len(prompt_ids), sampling.max_tokens)
        self._streams[request_id] = stream  # before the engine's answer: its first step may come with it
        try:
            await self.engine.add_request(EngineRequest(request_id, list(prompt_ids), sampling, arrival, priority))
        except asyncio.CancelledError:
            self.abort(request_id)  # the client went away while the engine took the request
            raise
        except EngineCoreDiedError as exc:
            self._streams.pop(request_id, None)
            raise EngineDeadError(str(exc)) from None
        except BaseException:
            self._streams.pop(request_id, None)
            raise
        self._wake.set()
        return stream

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request in the engine: the client went away (``abort``) or a stop string matched
        (``stop``). Queue and prefill times are unknown without the engine's final timestamps."""
        stream = self._streams.pop(request_id, None)
        if stream is None or stream.finished:
            return
        stream.finished = True
        if self.dead is None:
            self.engine.abort_request(request_id)
        last = stream.last_at if stream.last_at is not None else self.arrival_time()
        decode = None if stream.first_at is None else last - stream.first_at
        self.metrics.observe_finished(
            reason=reason, e2e=last - stream.arrival, queue=None, prefill=None, decode=decode, inference=None,
            prompt_tokens=stream.prompt_tokens, generation_tokens=stream.n_tokens, max_tokens=stream.max_tokens,
            preemptions=stream.preemptions)

    def abort_all(self) -> None:
        """Shutdown: end every in-flight request with finish_reason ``abort``."""
        for rid, stream in list(self._streams.items()):
            self.abort(rid)
            stream.queue.put_nowait(Delivery(RequestOutput(rid, [], finished=True, finish_reason="abort"),
                                             self._model_now))

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        while not self._stopping:
            if not self.engine.has_unfinished():
                self.drift = 0.0
                self.metrics.set_drift(0.0)
                self.metrics.set_idle()
                self._wake.clear()
                await self._wake.wait()
                self._model_now = max(self._model_now, self.real())
                continue
            self._engine_free.clear()
            try:
                result = await self.engine.step(self._model_now)
            except Exception as exc:
                self._die(str(exc) if isinstance(exc, EngineCoreDiedError) else f"{type(exc).__name__}: {exc}")
                return
            finally:
                self._engine_free.set()
            if self._slow_host > 0 and result.duration > 0:
                time.sleep(self._slow_host * result.duration * self.time_scale)  # blocks, as computing would
            end = self._model_now + max(result.duration, 0.0)
            self._step_end = end
            delay = end - self.real()
            await asyncio.sleep(delay * self.time_scale if delay > 0 else 0)
            if result.duration <= 0 and not result.outputs:
                await asyncio.sleep(0.001)  # nothing schedulable: let time pass instead of spinning
                end = max(end, self.real())
            self._step_end = None
            self._model_now = end
            self.drift = max(0.0, self.real() - end)
            self.max_drift = max(self.max_drift, self.drift)
            self.metrics.set_drift(self.drift)
            self.metrics.observe_step(result.stats)
            self.metrics.observe_step_time(max(result.duration, 0.0), self.drift)
            for out in result.outputs:
                self._deliver(out, end)

    def _deliver(self, out: RequestOutput, at: float) -> None:
        stream = self._streams.get(out.request_id)
        if stream is None or stream.finished:
            return
        stream.preemptions = max(stream.preemptions, out.num_preemptions)  # a running total, not a delta
        if out.new_token_ids:
            if stream.first_at is None:
                self.metrics.observe_first_token(at - stream.arrival)
            elif stream.last_at is not None:
                self.metrics.observe_output_gap(at - stream.last_at)
            stream.first_at = stream.first_at if stream.first_at is not None else at
            stream.last_at = at
            stream.n_tokens += len(out.new_token_ids)
        if out.finished:
            stream.finished = True
            del self._streams[out.request_id]
            self._observe_finished(stream, out, at)
        stream.queue.put_nowait(Delivery(out, at))

    def _observe_finished(self, stream: RequestStream, out: RequestOutput, at: float) -> None:
        t = out.times
        sched = t.scheduled if t else None
        first = t.first_token if t and t.first_token is not None else stream.first_at
        last = t.last_token if t and t.last_token is not None else stream.last_at
        queued = t.queued if t else stream.arrival
        self.metrics.observe_finished(
            reason=out.finish_reason or "stop",
            e2e=(last if last is not None else at) - stream.arrival,
            queue=None if sched is None else sched - queued,
            prefill=None if sched is None or first is None else first - sched,
            decode=None if first is None or last is None else last - first,
            inference=None if sched is None or last is None else last - sched,
            prompt_tokens=out.prompt_tokens or stream.prompt_tokens, generation_tokens=stream.n_tokens,
            max_tokens=stream.max_tokens, preemptions=stream.preemptions,
        )

    def _die(self, message: str) -> None:
        self.dead = message
        for stream in list(self._streams.values()):
            stream.error = message
            stream.finished = True
            stream.queue.put_nowait(Delivery(None, self._model_now))
        self._streams.clear()
