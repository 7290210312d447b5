"""``--sim-fault`` switches: engine faults go to ``EngineConfig.faults``; wire faults are applied here.

Wire faults reproduce what the gates' error taxonomy must recognise from the outside: a server
that dies (``crash_after=N``), streams that go silent without closing (``stall=P``), 5xx answers
(``http_500=P``) and a broken SSE data line mid-stream (``malformed_sse=P``). ``slow_host=F`` is the
host's, not the wire's: each engine step holds the server F times its modelled length, as a host too
slow for the load does, so the modelled clock trails (drift). Which request gets
which fault is drawn from a generator seeded by ``--seed``, so a run is reproducible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

ENGINE_FAULTS: Final[dict[str, float]] = {"lossy_verifier": 0.1, "sampling_drift": 0.1, "json_corruption": 0.2,
                                          "runaway": 0.2}
WIRE_FAULTS: Final[dict[str, float]] = {"crash_after": 10, "stall": 0.1, "http_500": 0.1, "malformed_sse": 0.1,
                                        "slow_host": 2.0}
ALL_FAULTS: Final = (*ENGINE_FAULTS, *WIRE_FAULTS)


class FaultSpecError(ValueError):
    """A ``--sim-fault`` value that names no fault or carries a bad value."""


def parse_fault(spec: str) -> tuple[str, float]:
    """``NAME[=VALUE]`` -> (name, value); the default value applies when none is given."""
    name, sep, raw = spec.partition("=")
    name = name.strip()
    if name not in ALL_FAULTS:
        raise FaultSpecError(f"unknown fault {name!r} (choose from {', '.join(ALL_FAULTS)})")
    default = ENGINE_FAULTS.get(name, WIRE_FAULTS.get(name, 0.0))
    if not sep:
        return name, float(default)
    try:
        value = float(raw)
    except ValueError:
        raise FaultSpecError(f"fault {name}: {raw!r} is not a number") from None
    if name == "crash_after":
        if value < 1 or value != int(value):
            raise FaultSpecError(f"fault crash_after: expected a whole number of requests >= 1, got {raw!r}")
    elif name in ("sampling_drift", "slow_host"):
        if value < 0:
            raise FaultSpecError(f"fault {name}: expected a value >= 0, got {raw!r}")
    elif not 0.0 <= value <= 1.0:
        raise FaultSpecError(f"fault {name}: expected a probability in [0, 1], got {raw!r}")
    return name, value


def split_faults(specs: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(engine faults, wire faults) from repeated ``--sim-fault`` values."""
    engine: dict[str, float] = {}
    wire: dict[str, float] = {}
    for spec in specs:
        name, value = parse_fault(spec)
        (engine if name in ENGINE_FAULTS else wire)[name] = value
    return engine, wire


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What to do to one request's response."""

    http_500: bool = False
    stall_after_chunks: int | None = None  # stop writing (without closing) after this many content chunks
    malformed_after_chunks: int | None = None  # send one broken data line after this many content chunks


class WireFaults:
    def __init__(self, faults: dict[str, float], seed: int) -> None:
        self._faults = dict(faults)
        self._rng = random.Random(seed ^ 0x5EED)
        self._finished = 0

    @property
    def active(self) -> bool:
        return bool(self._faults)

    @property
    def crash_after(self) -> int | None:
        value = self._faults.get("crash_after")
        return None if value is None else int(value)

    def plan(self) -> FaultPlan:
        """Draw the faults of the next request."""
        if not self._faults:
            return FaultPlan()
        http_500 = self._rng.random() < self._faults.get("http_500", 0.0)
        stall = self._rng.random() < self._faults.get("stall", 0.0)
        malformed = self._rng.random() < self._faults.get("malformed_sse", 0.0)
        return FaultPlan(
            http_500=http_500,
            stall_after_chunks=1 + self._rng.randrange(3) if stall else None,
            malformed_after_chunks=1 + self._rng.randrange(2) if malformed else None,
        )

    def request_finished(self) -> bool:
        """Count a finished response; True when the process should now crash."""
        self._finished += 1
        limit = self.crash_after
        return limit is not None and self._finished >= limit
