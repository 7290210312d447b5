"""Scenario → deterministic plan: what each request asks, and when it is meant to be sent.

Request ``i`` (class, prompt, sampling, seed) is a pure function of the scenario seed and ``i``,
so every worker and every variant sees the identical request ``i``. Open-loop send times use a
time change: request ``i`` has a cumulative unit mass ``U_i`` (sums of mean-1 gaps drawn from the
seed: 1 for constant, Exp(1) for Poisson, Gamma(b, 1/b) for burstiness b) and is due at the
active time ``τ_i`` where the integrated rate Λ(τ_i) = U_i. Ramps and ladders are just rate
functions; a live ``set_rate`` replaces the rate function from a point on, which re-times every
later request from that moment without touching earlier ones. Active time excludes pauses.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from speclab.model import limits as L
from speclab.model.errors import InputError
from speclab.model.limits import check_option
from speclab.model.prompt_ref import prompt_digest
from speclab.model.scenario import DEFAULT_MAX_TOKENS, Arrival, Scenario

Mode = Literal["open", "closed"]
_SEED_SPACE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    request_id: str
    prompt_class: str
    endpoint: str  # "chat" | "completions"
    messages: list[dict[str, str]] | None  # chat
    prompt: str | None  # completions
    sampling: dict[str, Any]  # exactly the sampling fields sent (max_tokens, temperature, seed, ...)
    schema: dict[str, Any] | None
    info: dict[str, Any]  # RequestRecord.prompt: a reference to what was asked (speclab.model.prompt_ref)
    tenant: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # the class's headers, the tenant's among them


@dataclass(frozen=True, slots=True)
class ClassPlan:
    name: str
    weight: float
    endpoint: str
    items: tuple[dict[str, Any], ...]  # {"ref", "messages"|"prompt", "max_tokens", "schema"}
    sampling: dict[str, Any]  # temperature/top_p/top_k/stop, and max_tokens when the class fixes it
    fixed_seed: int | None
    stochastic: bool
    tenant: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Segment:
    """Rate r(τ) = rate + slope·(τ − start) from ``start`` until the next segment."""

    start: float
    rate: float
    slope: float = 0.0

    def mass(self, length: float) -> float:
        return self.rate * length + 0.5 * self.slope * length * length

    def solve(self, mass: float) -> float:
        """The length x at which this segment has accumulated ``mass``."""
        if self.slope == 0.0:
            return mass / self.rate
        disc = self.rate * self.rate + 2.0 * self.slope * mass
        if disc <= 0.0:
            return math.inf
        return (math.sqrt(disc) - self.rate) / self.slope


@dataclass
class Plan:
    """Everything a worker needs to fire the scenario; picklable, built once in the parent."""

    name: str
    seed: int
    mode: Mode
    process: str
    classes: tuple[ClassPlan, ...]
    duration_s: float | None  # active seconds; None: bounded by requests only
    requests: int | None
    warmup_s: float
    warmup_requests: int
    stall_timeout_s: float
    request_timeout_s: float
    segments: tuple[Segment, ...] = ()  # open loop
    burstiness: float = 1.0  # gamma shape; 1.0 with poisson
    concurrency_steps: tuple[tuple[float, int], ...] = ()  # closed loop: (active start, N)
    overrides: dict[str, Any] = field(default_factory=dict)
    time_scale: float = 1.0  # the S ``wall_plan`` stretched it by: errors quote its times divided by S (modelled)

    def request(self, index: int) -> PlannedRequest:
        rng = random.Random(zlib.crc32(f"{self.seed}:{index}".encode()))
        total = self._total_weight()
        pick = rng.random() * total
        chosen = self.classes[-1]
        for cls in self.classes:
            pick -= cls.weight
            if pick < 0:
                chosen = cls
                break
        item = chosen.items[rng.randrange(len(chosen.items))]
        sampling = dict(chosen.sampling)
        if "max_tokens" not in sampling:
            sampling["max_tokens"] = item.get("max_tokens") or DEFAULT_MAX_TOKENS
        if chosen.fixed_seed is not None:
            sampling["seed"] = chosen.fixed_seed
        elif chosen.stochastic:
            sampling["seed"] = rng.randrange(_SEED_SPACE)
        schema = item.get("schema")
        info: dict[str, Any] = {"endpoint": chosen.endpoint, "index": index, "ref": item["ref"], "sha256": item["sha256"]}
        if schema is not None:
            info["has_schema"] = True
        messages = item.get("messages")
        prompt = item.get("prompt")
        if chosen.endpoint == "chat" and messages is None:
            messages = [{"role": "user", "content": prompt or ""}]
        if chosen.endpoint == "completions" and prompt is None:
            prompt = "\n\n".join(m["content"] for m in messages or [])
        return PlannedRequest(
            index=index,
            request_id=f"{self.name}-{self.seed}-{index}",
            prompt_class=chosen.name,
            endpoint=chosen.endpoint,
            messages=messages if chosen.endpoint == "chat" else None,
            prompt=prompt if chosen.endpoint == "completions" else None,
            sampling=sampling,
            schema=schema,
            info=info,
            tenant=chosen.tenant,
            headers=chosen.headers,
        )

    def prompt_items(self) -> Iterator[dict[str, Any]]:
        """Every prompt the plan can send, once: what a recording's prompts table holds."""
        for cls in self.classes:
            for item in cls.items:
                asked: dict[str, Any] = {k: item[k] for k in ("prompt", "messages") if k in item}
                yield {"ref": item["ref"], **({"id": item["id"]} if "id" in item else {}), "sha256": item["sha256"],
                       "class": cls.name, "endpoint": cls.endpoint, **asked, "schema": item.get("schema")}

    def _total_weight(self) -> float:
        return sum(c.weight for c in self.classes)

    def is_warmup(self, index: int, active_t: float) -> bool:
        return index < self.warmup_requests or active_t < self.warmup_s

    def unit_gaps(self) -> UnitGaps:
        return UnitGaps(self.seed, self.process, self.burstiness)

    def rate_function(self) -> RateFunction:
        return RateFunction(list(self.segments))

    def concurrency_at(self, active_t: float, steps: tuple[tuple[float, int], ...] | None = None) -> int:
        current = 0
        for start, n in steps if steps is not None else self.concurrency_steps:
            if start <= active_t:
                current = n
        return current

    def offsets(self, limit: int | None = None) -> list[tuple[float, PlannedRequest]]:
        """The open-loop schedule as (active offset, request), up to the run's end or ``limit``."""
        if self.mode != "open":
            raise InputError(f"scenario {self.name!r} is closed loop: requests are sent as slots free")
        gaps = self.unit_gaps()
        rates = self.rate_function()
        out: list[tuple[float, PlannedRequest]] = []
        index = 0
        while limit is None or index < limit:
            if self.requests is not None and index >= self.requests:
                break
            tau = rates.time_at(gaps.mass(index))
            if self.duration_s is not None and tau >= self.duration_s:
                break
            out.append((tau, self.request(index)))
            index += 1
        return out


class UnitGaps:
    """Cumulative unit mass U_i: U_0 = 0, U_i = U_{i-1} + gap_i with mean-1 gaps from the seed.

    Callers ask for non-decreasing indices, so only the latest (index, mass) is kept: a run of any
    length costs constant memory. Asking for an earlier index replays the stream from the start.
    """

    def __init__(self, seed: int, process: str, burstiness: float) -> None:
        self._seed = seed
        self._process = process
        self._shape = burstiness
        self._restart()

    def _restart(self) -> None:
        self._rng = random.Random(zlib.crc32(f"arrival:{self._seed}".encode()))
        self._index = 0
        self._mass = 0.0

    def _gap(self) -> float:
        if self._process == "poisson":
            return self._rng.expovariate(1.0)
        if self._process == "gamma":
            return self._rng.gammavariate(self._shape, 1.0 / self._shape)
        return 1.0

    def mass(self, index: int) -> float:
        if index < self._index:
            self._restart()
        while self._index < index:
            self._mass += self._gap()
            self._index += 1
        return self._mass


class RateFunction:
    """A piecewise-linear rate over active time; ``override`` replaces it from a point on."""

    def __init__(self, segments: list[Segment]) -> None:
        if not segments:
            raise ValueError("a rate function needs at least one segment")
        self.segments = segments
        self._prefix = self._prefix_masses()

    def _prefix_masses(self) -> list[float]:
        masses = [0.0]
        for a, b in zip(self.segments, self.segments[1:], strict=False):
            masses.append(masses[-1] + a.mass(b.start - a.start))
        return masses

    def time_at(self, mass: float) -> float:
        """Active time τ at which the integrated rate reaches ``mass``."""
        segs, prefix = self.segments, self._prefix
        for i in range(len(segs)):
            last = i == len(segs) - 1
            if last or prefix[i + 1] > mass:
                return segs[i].start + segs[i].solve(mass - prefix[i])
        return math.inf  # pragma: no cover

    def override(self, at: float, rate: float) -> None:
        """From active time ``at`` on, a constant ``rate``."""
        kept: list[Segment] = [s for s in self.segments if s.start < at]
        kept.append(Segment(at, rate, 0.0))
        self.segments = kept
        self._prefix = self._prefix_masses()


def build_plan(
    scenario: Scenario,
    *,
    duration_s: float | None = None,
    requests: int | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    seed: int | None = None,
) -> Plan:
    """The plan for ``scenario`` with command-line overrides applied.

    ``rate`` makes the run open loop (keeping constant/poisson/gamma, else Poisson); ``concurrency``
    makes it closed loop. ``duration_s`` and ``requests`` replace the scenario's bounds.
    """
    if rate is not None and concurrency is not None:
        raise InputError("--rate and --concurrency: give one, not both")
    check_option("--rate", rate, 0, L.MAX_RATE, low_open=True)
    check_option("--concurrency", concurrency, 1, L.MAX_CONCURRENCY)
    check_option("--duration", duration_s, 0, L.MAX_DURATION_S, low_open=True)
    check_option("--requests", requests, 1, L.MAX_REQUESTS)
    check_option("--seed", seed, L.SEED_MIN, L.SEED_MAX)
    arrival = _apply_arrival_overrides(scenario.arrival, rate, concurrency)
    dur = scenario.duration_s if duration_s is None and requests is None else duration_s
    req = scenario.requests if duration_s is None and requests is None else requests
    if arrival.steps:
        ladder = arrival.steps_duration_s
        dur = ladder if dur is None else min(dur, ladder or dur)
    if arrival.process == "ramp" and dur is None:
        raise InputError("--requests: a ramp runs over a duration; give --duration as well")
    if dur is None and req is None:
        raise InputError(f"scenario {scenario.name!r}: give a duration or a request count")
    name = scenario.name or "scenario"
    plan = Plan(
        name=name,
        seed=scenario.seed if seed is None else seed,
        mode="open" if arrival.open_loop else "closed",
        process=arrival.process,
        classes=tuple(_class_plan(scenario, n) for n in scenario.classes),
        duration_s=dur,
        requests=req,
        warmup_s=scenario.warmup_s,
        warmup_requests=scenario.warmup_requests,
        stall_timeout_s=scenario.stall_timeout_s,
        request_timeout_s=scenario.request_timeout_s,
        burstiness=arrival.burstiness or 1.0,
        overrides={
            k: v
            for k, v in {"duration_s": duration_s, "requests": requests, "rate": rate,
                         "concurrency": concurrency, "seed": seed}.items()
            if v is not None
        },
    )
    if plan.mode == "open":
        plan.segments = _segments(arrival, dur)
    else:
        plan.concurrency_steps = _concurrency_steps(arrival)
    return plan


def _apply_arrival_overrides(arrival: Arrival, rate: float | None, concurrency: int | None) -> Arrival:
    if rate is not None:
        if arrival.process in ("constant", "poisson", "gamma"):
            return arrival.model_copy(update={"rate": rate})
        return Arrival(process="poisson", rate=rate)
    if concurrency is not None:
        return Arrival(process="concurrency", concurrency=concurrency)
    return arrival


def _segments(arrival: Arrival, duration: float | None) -> tuple[Segment, ...]:
    if arrival.process == "ramp":
        assert arrival.start_rate is not None and arrival.end_rate is not None and duration
        slope = (arrival.end_rate - arrival.start_rate) / duration
        return (Segment(0.0, arrival.start_rate, slope), Segment(duration, arrival.end_rate, 0.0))
    if arrival.process == "steps":
        out, start = [], 0.0
        for step in arrival.steps or []:
            assert step.rate is not None
            out.append(Segment(start, step.rate))
            start += step.duration_s
        return tuple(out)
    assert arrival.rate is not None
    return (Segment(0.0, arrival.rate),)


def _concurrency_steps(arrival: Arrival) -> tuple[tuple[float, int], ...]:
    if arrival.process == "steps":
        out, start = [], 0.0
        for step in arrival.steps or []:
            assert step.concurrency is not None
            out.append((start, step.concurrency))
            start += step.duration_s
        return tuple(out)
    assert arrival.concurrency is not None
    return ((0.0, arrival.concurrency),)


def _class_plan(scenario: Scenario, name: str) -> ClassPlan:
    spec = scenario.classes[name]
    items: list[dict[str, Any]] = []
    for position, item in enumerate(spec.items()):
        entry: dict[str, Any] = {"ref": f"{name}/{position}"}
        if item.id is not None:  # the prompts file's own name for the line, kept beside the ref
            entry["id"] = item.id
        if item.messages is not None:
            entry["messages"] = item.as_messages()
        else:
            entry["prompt"] = item.prompt
        entry["sha256"] = prompt_digest(entry)
        entry["max_tokens"] = item.max_tokens
        entry["schema"] = item.schema_ if item.schema_ is not None else spec.schema_
        items.append(entry)
    sampling: dict[str, Any] = {} if spec.max_tokens is None else {"max_tokens": spec.max_tokens}
    for key in ("temperature", "top_p", "top_k"):
        value = getattr(spec, key)
        if value is not None:
            sampling[key] = value
    if spec.stop:
        sampling["stop"] = [spec.stop] if isinstance(spec.stop, str) else list(spec.stop)
    return ClassPlan(
        name=name,
        weight=spec.weight,
        endpoint=scenario.endpoint_of(name),
        items=tuple(items),
        sampling=sampling,
        fixed_seed=spec.seed,
        stochastic=spec.stochastic,
        tenant=spec.tenant,
        headers={**spec.headers, **({scenario.tenant_header: spec.tenant} if spec.tenant else {})},
    )
