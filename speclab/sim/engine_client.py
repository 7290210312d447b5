"""How the server's engine loop talks to an engine core: one protocol, two ways to run the core.

``EngineClient`` is what ``EngineLoop`` steps. ``InProcessClient`` calls an ``EngineCore`` in the
server's own process (the test engines, and ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` as in vLLM);
``engine_process.EngineProcess`` runs the core in a process of its own, as vLLM 0.33's AsyncLLM
runs its EngineCore, so the HTTP side and the step loop do not share one core of the host.
"""

from __future__ import annotations

import os
from typing import Protocol

from .api import EngineConfig, EngineCore, EngineRequest, MemoryFacts, StepResult, Tokenizer


class EngineCoreDiedError(RuntimeError):
    """The engine core went away (its process was killed or crashed, or its socket closed)."""


class EngineClient(Protocol):
    config: EngineConfig
    tokenizer: Tokenizer
    memory: MemoryFacts
    notes: list[str]  # start-up warnings the server logs
    pid: int  # the engine core's process

    async def add_request(self, request: EngineRequest) -> None:
        """Hand a request to the core; raises what the core raises for a request it refuses."""
        ...

    def abort_request(self, request_id: str) -> None: ...
    def has_unfinished(self) -> bool: ...

    async def step(self, now: float) -> StepResult:
        """One step at modelled time ``now``; raises what the core raised (the core is then dead)."""
        ...

    def close(self) -> None: ...


class InProcessClient:
    """An ``EngineCore`` stepped on the server's own loop: a step holds the loop while it computes."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.config = core.config
        self.tokenizer = core.tokenizer
        self.memory = core.memory
        self.notes: list[str] = list(getattr(core, "notes", []))
        self.pid = os.getpid()

    async def add_request(self, request: EngineRequest) -> None:
        self.core.add_request(request)

    def abort_request(self, request_id: str) -> None:
        self.core.abort_request(request_id)

    def has_unfinished(self) -> bool:
        return self.core.has_unfinished()

    async def step(self, now: float) -> StepResult:
        return self.core.step(now)

    def close(self) -> None:
        pass
