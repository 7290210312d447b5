"""A frozen, realistic snapshot stream for the app's tests and demo.

``FakeSource`` implements ``SnapshotSource`` and ``LiveControls``: it replays a fixed list of
snapshots (three variants, four prompt classes, numbers shaped like a small speculative-decoding
run on the simulator), then waits until stopped, and records every control call so tests can
assert on exactly what the app asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from textual.pilot import Pilot

if TYPE_CHECKING:
    from speclab.ui import SpeclabApp

from speclab.model.epochs import EpochInfo
from speclab.model.names import PERCENTILE_POINTS, Metric
from speclab.model.records import Event, ServerSample
from speclab.model.snapshot import (
    ALL_CLASSES,
    ABView,
    ABWindow,
    AcceptanceStats,
    ClassStats,
    ClientHealth,
    EpochStats,
    IntervalStats,
    Percentiles,
    Snapshot,
    SplitRow,
    VariantStats,
)
from speclab.session.api import ServerView, SessionInfo

VARIANTS = ("baseline", "k2", "k4")
CLASSES = ("factual_qa", "tool_call", "long_continuation", "refusal")
K = {"baseline": 0, "k2": 2, "k4": 4}

# Relative shape of a latency distribution at PERCENTILE_POINTS (p50 = 1).
_SHAPE = (0.35, 1.0, 1.22, 1.55, 1.8, 2.4, 2.7, 3.4, 3.8, 4.6, 5.2)
# Per class: p50 e2e (ms) on the baseline, output tokens per request, share of time in prefill.
_CLASS = {
    "factual_qa": (620.0, 48, 0.12),
    "tool_call": (410.0, 36, 0.18),
    "long_continuation": (2900.0, 240, 0.04),
    "refusal": (260.0, 22, 0.2),
}
# Per (variant, class): the draft's per-position acceptance probability.
_ACCEPT = {"factual_qa": 0.66, "tool_call": 0.82, "long_continuation": 0.71, "refusal": 0.88}
_SPEEDUP = {"baseline": 1.0, "k2": 0.74, "k4": 0.69}
_TAIL = {"baseline": 1.0, "k2": 1.08, "k4": 1.22}


def percentiles(p50_us: float, count: int, tail: float = 1.0) -> Percentiles:
    values = []
    for i, shape in enumerate(_SHAPE):
        stretch = 1.0 + (tail - 1.0) * (i / (len(_SHAPE) - 1)) * 2
        values.append(round(p50_us * shape * (stretch if shape > 1 else 1.0)))
    values = [max(values[: i + 1]) for i in range(len(values))]
    assert len(values) == len(PERCENTILE_POINTS)
    return Percentiles(count=count, mean=p50_us * 1.12 * tail, values=tuple(values))


def acceptance(k: int, cls: str, requests: int, tokens: int, drift: float) -> AcceptanceStats:
    if k == 0:
        return AcceptanceStats()
    a = max(0.05, min(0.97, _ACCEPT[cls] - drift - 0.03 * (k - 2)))
    probs = [a**j * (1 - a) for j in range(k)] + [a**k]
    mean_len = 1 + sum(j * p for j, p in enumerate(probs))
    steps = max(1, round(tokens / mean_len))
    hist = [round(steps * p) for p in probs]
    steps = sum(hist)
    accepted = sum(j * n for j, n in enumerate(hist))
    source = "exact" if cls != "long_continuation" else "estimated"
    return AcceptanceStats(
        requests=requests, steps=steps, drafted=steps * k, accepted=accepted, histogram=tuple(hist), source=source
    )


def class_stats(
    variant: str, cls: str, requests: int, window_s: float, drift: float = 0.0, k: int | None = None
) -> ClassStats:
    p50_ms, out_tokens, prefill_share = _CLASS[cls]
    e2e_us = p50_ms * 1000 * _SPEEDUP[variant] * (1 + drift)
    tail = _TAIL[variant] + drift
    lag_us = 900.0 + 300 * drift
    queue_us = e2e_us * 0.06
    prefill_us = e2e_us * prefill_share
    decode_us = e2e_us - queue_us - prefill_us
    latency = {
        Metric.SCHEDULE_LAG.value: percentiles(lag_us, requests, 1.3),
        Metric.E2E.value: percentiles(e2e_us, requests, tail),
        Metric.E2E_CORRECTED.value: percentiles(e2e_us + lag_us, requests, tail + 0.05),
        Metric.TTFT.value: percentiles(queue_us + prefill_us, requests, tail),
        Metric.TTFT_CORRECTED.value: percentiles(queue_us + prefill_us + lag_us, requests, tail + 0.05),
        Metric.SERVER_QUEUE.value: percentiles(queue_us, requests, tail * 1.4),
        Metric.SERVER_PREFILL.value: percentiles(prefill_us, requests, tail),
        Metric.SERVER_DECODE.value: percentiles(decode_us, requests, tail),
        Metric.TPOT.value: percentiles(decode_us / out_tokens, requests, tail),
    }
    tokens = requests * out_tokens
    client_us = 2500.0
    mid = SplitRow(max(1, requests // 10), max(1, requests // 10), lag_us, queue_us, prefill_us,
                   decode_us - client_us, client_us, e2e_us + lag_us)
    slow_queue = queue_us * (4 if variant == "k4" and cls == "tool_call" else 1.5)
    tail_row = SplitRow(max(1, requests // 100), max(1, requests // 100), lag_us * 1.3, slow_queue, prefill_us * tail,
                        decode_us * tail - client_us, client_us * 1.2,
                        lag_us * 1.3 + slow_queue + prefill_us * tail + decode_us * tail + client_us * 0.2)
    structured = requests if cls == "tool_call" else 0
    failed = {"baseline": 0, "k2": 0, "k4": 1}[variant] if structured and requests >= 8 else 0
    return ClassStats(
        requests=requests,
        errors={"timeout": 1} if variant == "k4" and cls == "long_continuation" and requests > 20 else {},
        output_tokens=tokens,
        latency=latency,
        acceptance=acceptance(K[variant] if k is None else k, cls, requests, tokens, drift),
        structured_total=structured,
        structured_failed=failed,
        timing_source="exact",
        window_s=window_s,
        split_p50=mid if requests else None,
        split_tail=tail_row if requests else None,
    )


def _total(classes: dict[str, ClassStats], window_s: float, variant: str, drift: float) -> ClassStats:
    requests = sum(c.requests for c in classes.values())
    total = class_stats(variant, "factual_qa", requests, window_s, drift)
    acc = [c.acceptance for c in classes.values()]
    width = max((len(a.histogram) for a in acc), default=0)
    hist = tuple(sum(a.histogram[j] for a in acc if j < len(a.histogram)) for j in range(width))
    merged = AcceptanceStats(
        requests=sum(a.requests for a in acc),
        steps=sum(a.steps for a in acc),
        drafted=sum(a.drafted for a in acc),
        accepted=sum(a.accepted for a in acc),
        histogram=hist,
        source="estimated" if any(a.source == "estimated" for a in acc) else ("exact" if hist else "none"),
    )
    errors: dict[str, int] = {}
    for c in classes.values():
        for kind, n in c.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    return ClassStats(
        requests=requests,
        errors=errors,
        output_tokens=sum(c.output_tokens for c in classes.values()),
        latency=total.latency,
        split_p50=total.split_p50,
        split_tail=total.split_tail,
        acceptance=merged,
        structured_total=sum(c.structured_total for c in classes.values()),
        structured_failed=sum(c.structured_failed for c in classes.values()),
        timing_source="exact",
        window_s=window_s,
    )


def variant_stats(
    variant: str, per_class: int, window_s: float, drift: float = 0.0, k: int | None = None, epoch: int = 1,
    label: str = "",
) -> VariantStats:
    classes = {
        cls: class_stats(variant, cls, per_class + (i % 2), window_s, drift, k) for i, cls in enumerate(CLASSES)
    }
    classes[ALL_CLASSES] = _total(classes, window_s, variant, drift)
    return VariantStats(variant=variant, classes=classes, epoch=epoch, label=label or variant)


# k4 is relaunched with k=3: asked at t=9.0 (interval 8), answering from t=9.5 (its epoch 2).
RELAUNCH_ASKED_T = 9.0
EPOCH2_T = 9.5
EPOCH2_LABEL = "k4·2 (k=3)"


def _settings(variant: str, k: int | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"max_num_seqs": 64, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True}
    kk = K[variant] if k is None else k
    return {"num_speculative_tokens": kk, **settings} if kk else settings


def ab_window(variant: str, epoch: int, label: str, first: int, last: int, drift: float, k: int | None) -> ABWindow:
    """A window of whole intervals first..last (shaped like the aggregator's), beside the baseline."""
    n = last - first + 1
    return ABWindow(
        epoch=epoch, label=label, baseline_epoch=1, baseline_label="baseline", first_interval=first,
        last_interval=last, start_s=float(first), end_s=float(last + 1),
        own=variant_stats(variant, 3 * n, float(n), drift, k, epoch, label),
        baseline=variant_stats("baseline", 3 * n, float(n)),
    )


def ab_views(t: float, closed: int) -> dict[str, ABView]:
    """The A/B each non-baseline variant has once interval ``closed`` has closed at time ``t``."""
    views = {"k2": ABView("k2", "baseline", ab_window("k2", 1, "k2", 0, closed, 0.0, None))}
    if t < RELAUNCH_ASKED_T:
        views["k4"] = ABView("k4", "baseline", ab_window("k4", 1, "k4", 0, closed, 0.04, None))
    elif t < EPOCH2_T:
        views["k4"] = ABView("k4", "baseline", ab_window("k4", 1, "k4", 0, 8, 0.04, None), relaunching=True)
    else:
        n = max(0, closed - 9)  # whole intervals from 10 on
        current = (ab_window("k4", 2, EPOCH2_LABEL, 10, closed, -0.02, 3) if n
                   else ABWindow(epoch=2, label=EPOCH2_LABEL, baseline_epoch=1, baseline_label="baseline"))
        previous = (ab_window("k4", 1, "k4", 9 - n, 8, 0.04, None) if n
                    else ABWindow(epoch=1, label="k4", baseline_epoch=1, baseline_label="baseline"))
        views["k4"] = ABView("k4", "baseline", current, previous)
    return views


def epochs_at(t: float, interval: int, cumulative: dict[str, VariantStats]) -> dict[str, tuple[EpochStats, ...]]:
    out: dict[str, tuple[EpochStats, ...]] = {
        v: (EpochStats(EpochInfo(v, 1, v, _settings(v), 0.0), cumulative[v]),) for v in VARIANTS if v != "k4"
    }
    if t < RELAUNCH_ASKED_T:
        out["k4"] = (EpochStats(EpochInfo("k4", 1, "k4", _settings("k4"), 0.0), cumulative["k4"]),)
        return out
    first = EpochStats(EpochInfo("k4", 1, "k4", _settings("k4"), 0.0, RELAUNCH_ASKED_T),
                       variant_stats("k4", 4 * 9, 9.0, 0.04))
    out["k4"] = (first,) if t < EPOCH2_T else (
        first, EpochStats(EpochInfo("k4", 2, EPOCH2_LABEL, _settings("k4", 3), EPOCH2_T), cumulative["k4"]))
    return out


def _drift(variant: str, interval: int) -> float:
    """k4 has a rejection spike at intervals 6-7; the relaunch with k=3 (asked at t=9 s, answering
    from t=9.5 s) shows from interval 9."""
    if variant != "k4":
        return 0.0
    if interval in (6, 7):
        return 0.25
    return -0.02 if interval >= 9 else 0.0


def build_snapshots(intervals: int = 12) -> list[Snapshot]:
    """Four snapshots per closed interval, as the aggregator emits them at 4 Hz."""
    snaps: list[Snapshot] = []
    for interval in range(intervals):
        for quarter in range(4):
            t = 1.0 + interval + quarter * 0.25
            events: tuple[Event, ...] = ()
            if quarter == 0 and interval == 3:
                events = (Event(t=t, kind="config_change", message="rate 8 → 10 req/s", data={"rate": 10.0}),)
            if t == RELAUNCH_ASKED_T:
                events = (Event(t=t, kind="transition", message="k4: relaunching with k=3; k4 ends here",
                                variant="k4", data={"from_epoch": 1, "to_epoch": 2}),)
            if t == EPOCH2_T:
                events = (
                    Event(
                        t=t,
                        kind="relaunch",
                        message=f"k4 relaunched: num_speculative_tokens 4->3; {EPOCH2_LABEL} from t=9.5 s",
                        variant="k4",
                        data={"changes": {"num_speculative_tokens": {"from": 4, "to": 3}}, "epoch": 2,
                              "label": EPOCH2_LABEL, "settings": _settings("k4", 3)},
                    ),
                )
            per_class = 2 + interval % 3
            cumulative = {
                v: variant_stats(v, 4 * (interval + 1), interval + 1.0, 0.04 if v == "k4" else 0.0) for v in VARIANTS
            }
            if t >= EPOCH2_T:
                n = interval - 8
                cumulative["k4"] = variant_stats("k4", 4 * n, float(n), -0.02, 3, 2, EPOCH2_LABEL)
            k4_new = interval >= 9
            closed = {
                v: variant_stats(v, per_class, 1.0, _drift(v, interval), 3 if v == "k4" and k4_new else None,
                                 2 if v == "k4" and k4_new else 1, EPOCH2_LABEL if v == "k4" and k4_new else "")
                for v in VARIANTS
            }
            snaps.append(
                Snapshot(
                    t=t,
                    interval=interval,
                    cumulative=cumulative,
                    last_interval=closed,
                    intervals=(IntervalStats(interval, float(interval), interval + 1.0, closed),) if quarter == 0 else (),
                    rebuilt=interval == 0 and quarter == 0,
                    servers={v: server_sample(v, t, interval) for v in VARIANTS},
                    health=ClientHealth(
                        schedule_lag_p99_ms=1.4 if interval != 5 else 38.0,
                        loop_lag_max_ms=0.8,
                        cpu_percent=22.0,
                        in_flight=7,
                        saturated=interval == 5,
                        reason="event loop lag 38 ms" if interval == 5 else "",
                    ),
                    events=events,
                    saturated_intervals=(5,) if interval >= 5 else (),
                    simulated=True,
                    epochs=epochs_at(t, interval, cumulative),
                    ab=ab_views(t, interval),
                )
            )
    return snaps


def server_sample(variant: str, t: float, interval: int) -> ServerSample:
    load = {"baseline": 0.31, "k2": 0.38, "k4": 0.47}[variant]
    return ServerSample(
        t=t,
        variant=variant,
        up=not (variant == "k4" and interval == 8),
        running=6 + interval % 3,
        waiting=1 if variant == "k4" else 0,
        kv_usage=min(0.95, load + 0.01 * interval),
        generation_tokens=410.0,
        requests_finished=9.0,
    )


def server_views() -> dict[str, ServerView]:
    views: dict[str, ServerView] = {}
    for variant in VARIANTS:
        k = K[variant]
        spec = f" --speculative-config '{{\"method\":\"draft_model\",\"model\":\"sim-0.5b\",\"num_speculative_tokens\":{k}}}'" if k else ""
        settings: dict[str, Any] = {"max_num_seqs": 64, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True}
        if k:
            settings = {"num_speculative_tokens": k, **settings}
        views[variant] = ServerView(
            variant=variant,
            status="ready",
            command=(
                "python -m speclab.sim sim-8b --host 127.0.0.1 --port "
                f"{8100 + len(views)} --max-num-seqs 64 --max-num-batched-tokens 8192 --enable-chunked-prefill"
                f"{spec} --seed 0"
            ),
            base_url=f"http://127.0.0.1:{8100 + len(views)}",
            engine="sim",
            settings=settings,
            memory={
                "weights_gib": 14.9 + (0.93 if k else 0.0),
                "kv_cache_tokens": 412_000 - (38_000 if k else 0),
                "max_concurrency": 100.6 - (9.3 if k else 0.0),
            },
            log_tail=(
                "INFO Starting vLLM API server on http://127.0.0.1:8100",
                f"INFO Loading model sim-8b{' with draft sim-0.5b' if k else ''}",
                "INFO Application startup complete.",
            ),
            baseline=variant == "baseline",
        )
    return views


class FakeSource:
    """``SnapshotSource`` + ``LiveControls`` over frozen snapshots; records every call."""

    def __init__(
        self,
        snapshots: list[Snapshot] | None = None,
        *,
        delay: float = 0.0,
        replay: bool = False,
        loop_forever: bool = False,
    ) -> None:
        self.info = SessionInfo(
            lab="default",
            scenario="mixed",
            variants=VARIANTS,
            classes=CLASSES,
            simulated=True,
            pair={"target": "sim-8b", "draft": "sim-0.5b"},
            arrival={"process": "poisson", "rate": 8.0},
            replay=replay,
        )
        self.frozen = snapshots if snapshots is not None else build_snapshots()
        self.delay = delay
        self.loop_forever = loop_forever
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.stopped = asyncio.Event()
        self.yielded = 0
        self._views = server_views()

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        while True:
            for snap in self.frozen:
                if self.stopped.is_set():
                    return
                self.yielded += 1
                yield snap
                await asyncio.sleep(self.delay)
            if not self.loop_forever:
                break
        await self.stopped.wait()

    def servers(self) -> dict[str, ServerView]:
        return self._views

    async def stop(self) -> None:
        self.calls.append(("stop", ()))
        self.stopped.set()

    async def pause(self) -> None:
        self.calls.append(("pause", ()))

    async def resume(self) -> None:
        self.calls.append(("resume", ()))

    async def set_rate(self, rate: float) -> None:
        self.calls.append(("set_rate", (rate,)))

    async def set_concurrency(self, concurrency: int) -> None:
        self.calls.append(("set_concurrency", (concurrency,)))

    async def relaunch(self, variant: str, changes: dict[str, Any]) -> None:
        self.calls.append(("relaunch", (variant, changes)))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


async def settle(pilot: Pilot[Any], app: SpeclabApp, source: FakeSource) -> None:
    """Wait until every frozen snapshot has been taken in and painted."""
    for _ in range(300):
        if app.state.snapshots_seen == len(source.frozen):
            break
        await pilot.pause(0.01)
    await pilot.pause()
    assert app.state.snapshots_seen == len(source.frozen)
