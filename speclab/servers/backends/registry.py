"""The registry of serving engines: one backend per :class:`EngineId`.

Order matters: ``--engine auto`` takes the first real (not simulated) backend that detects itself
here, and falls back to the simulated one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .base import Backend
from .ids import EngineId, engine_id
from .sim import SimBackend
from .vllm import VllmBackend

BACKENDS: Mapping[EngineId, Backend] = MappingProxyType({
    EngineId.VLLM: VllmBackend(),
    EngineId.SIM: SimBackend(),
})


def backend(engine: str | EngineId) -> Backend:
    """The backend for an ``--engine`` word or id; InputError (exit 2) for anything else."""
    return BACKENDS[engine_id(engine)]


def fallback() -> Backend:
    """The backend ``--engine auto`` runs where no real engine is available: the simulator."""
    return next(b for b in BACKENDS.values() if b.simulated)
