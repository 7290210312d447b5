"""What speclab needs to know about one serving engine, in one protocol.

Everything engine-specific (its command line and flag table, when it is ready, the start-up log
lines that state its memory, the Prometheus series it exposes, the per-request metrics in its
responses, how to tell it is installed here) is answered by one :class:`Backend`, so adding an
engine is one module plus its entry in :mod:`speclab.servers.backends.registry` (docs/contributing.md).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from speclab.model.records import SpecCounts

from .ids import EngineId

if TYPE_CHECKING:
    from speclab.model.lab import Effective, Lab

SIM_MODULE = "speclab.sim"

ExitCause = tuple[str, tuple[re.Pattern[str], ...]]  # a cause of death, and the log lines that show it
Which = Callable[[str], str | None]  # shutil.which
GpuProbe = Callable[[], str | None]  # how a GPU was found, or None


@dataclass(frozen=True, slots=True)
class FlagTable:
    """The serve flags of one engine version: flag -> takes a value (True) or is a switch (False)."""

    emitted: Mapping[str, bool]  # the only flags the argv builder writes
    other_known: Mapping[str, bool]  # accepted by the engine's parser, not written by speclab
    aliases: Mapping[str, str]  # short form -> long flag
    removed: frozenset[str]  # flags of older versions this one's parser refuses


@dataclass(frozen=True, slots=True)
class MemoryLines:
    """Start-up log lines that state memory facts: weights, KV-cache tokens, maximum concurrency.

    ``concurrency`` has two groups: the tokens per request it is stated for, and the factor.
    """

    weights_gib: re.Pattern[str]
    kv_cache_tokens: re.Pattern[str]
    concurrency: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Launch:
    """Where and how one server process starts.

    ``python`` and ``module`` are for backends that run as ``python -m MODULE`` (the simulator);
    tests put stand-ins there. Backends with an executable of their own ignore them.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    python: str = sys.executable
    module: str = SIM_MODULE
    time_scale: float = 1.0  # the run's S; only the simulator takes one (real servers run at 1)


@dataclass(frozen=True, slots=True)
class Readiness:
    """When a launched server counts as ready, and how long that may take."""

    health_path: str  # a 200 here means ready
    start_timeout_s: float  # default wait for the first 200 after launch
    answer_timeout_s: float  # wait for the first answer after a relaunch
    serves_launch_token: bool  # /version carries SPECLAB_LAUNCH_TOKEN (else /v1/models is checked)


@dataclass(frozen=True, slots=True)
class Detection:
    """Whether the engine can run here: ``found`` says how it was found, ``missing`` what is absent."""

    found: str | None = None
    missing: str | None = None

    @property
    def available(self) -> bool:
        return self.found is not None


@dataclass(frozen=True, slots=True)
class ResponseMetrics:
    """The server's own timing and speculation counts for one request, from its final response."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    spec: SpecCounts | None = None


@dataclass(frozen=True, slots=True)
class PromNames:
    """Prometheus names: speclab's series (vLLM 0.33's names, which recordings keep) -> the name this
    engine exposes for it. Series absent from ``exposed`` are exposed under speclab's name."""

    exposed: Mapping[str, str] = field(default_factory=dict)

    def renames(self) -> dict[str, str]:
        """Exposed name -> speclab's name, for the series whose names differ."""
        return {theirs: ours for ours, theirs in self.exposed.items() if theirs != ours}


class Backend(Protocol):
    """One serving engine as speclab launches, watches and measures it."""

    @property
    def id(self) -> EngineId: ...

    @property
    def label(self) -> str:
        """How reports name it ("vLLM", "vLLM-compatible simulator")."""
        ...

    @property
    def simulated(self) -> bool: ...

    @property
    def flags(self) -> FlagTable: ...

    @property
    def readiness(self) -> Readiness: ...

    @property
    def memory_lines(self) -> MemoryLines: ...

    @property
    def exit_causes(self) -> Sequence[ExitCause]:
        """Why a server died, from its log, in priority order."""
        ...

    @property
    def prometheus(self) -> PromNames: ...

    def served_model_name(self, lab: Lab) -> str:
        """The model name clients send to this engine's server for ``lab``."""
        ...

    def speculative_config(self, lab: Lab, eff: Effective) -> dict[str, Any] | None:
        """The speculative-decoding settings the engine is given for one variant (None: plain)."""
        ...

    def argv(self, lab: Lab, variant: str, launch: Launch) -> list[str]:
        """The full command line for one variant's server."""
        ...

    def env(self, lab: Lab, variant: str, *, api_key: str | None = None) -> dict[str, str]:
        """Environment additions for one variant's server (the API key included, never in argv)."""
        ...

    def parse_response_metrics(self, metrics: Mapping[str, Any]) -> ResponseMetrics:
        """The per-request metrics object of a final response, read into speclab's terms."""
        ...

    def detect(self, *, which: Which, gpu_probe: GpuProbe) -> Detection:
        """Can this engine run on this machine?"""
        ...

    def recognises(self, metrics_text: str) -> bool:
        """Does an attached server's ``/metrics`` text show it is this engine?"""
        ...
