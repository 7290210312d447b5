"""The engines ``--engine`` names, kept free of imports so the command line can list them cheaply.

Each id has exactly one backend in :data:`speclab.servers.backends.registry.BACKENDS` (a test
holds the two together); ``auto`` is not an engine but the request to pick one.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, Literal

from speclab.model.errors import InputError

AUTO: Final = "auto"


class EngineId(str, Enum):
    """A ``str`` enum whose ``str()`` is its value, so ids compare equal to the words recordings,
    reports and ``--engine`` use, and serialise as those words. Order is ``--engine auto``'s
    preference among real engines, and the order help lists them in."""

    VLLM = "vllm"
    SIM = "sim"

    def __str__(self) -> str:
        return self.value


EngineRequest = EngineId | Literal["auto"]  # what a run is asked for: an engine, or auto's pick


def engine_request(value: str | EngineId) -> EngineRequest:
    """``--engine``'s word as a request: ``auto`` or an engine id (InputError for anything else)."""
    return AUTO if value == AUTO else engine_id(value)


def engine_choices() -> list[str]:
    """What ``--engine`` accepts."""
    return [AUTO, *(engine.value for engine in EngineId)]


def engine_id(name: str | EngineId) -> EngineId:
    """The id for an ``--engine`` word; InputError (exit 2) listing the choices otherwise."""
    try:
        return EngineId(name)
    except ValueError:
        *rest, last = engine_choices()
        raise InputError(f"--engine: expected {', '.join(rest)} or {last}, got {name!r}") from None
