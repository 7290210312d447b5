"""The runner of every accept stage, by the stage's name in ``speclab.gates.stages.STAGES``.

A runner sends the stage's traffic through the ``AcceptContext`` and hands the records to the
stage's evaluation; a load stage also returns its final snapshot (the report's variant tables
come from the last one). ``preflight`` checks, before any server starts, what the stage will need
(the canary's HAProxy): a missing tool is bad input then, not a failure half-way through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from speclab.gates.result import StageResult
from speclab.gates.stages import (
    CANARY,
    EQUIVALENCE,
    GOLDEN,
    LATENCY_CURVE,
    STAGE_ORDER,
    STRESS,
    STRUCTURED,
    TOKENIZER_ALIGNMENT,
)
from speclab.gateway.config import find_haproxy
from speclab.model.lab import Lab
from speclab.model.snapshot import Snapshot

from .accept_context import AcceptContext
from .accept_correctness import equivalence_stage, golden_stage, structured_stage, tokenizer_stage
from .accept_gateway import gateway_canary_configured
from .accept_load import canary_stage, latency_stage, stress_stage

StageOutcome = tuple[StageResult, Snapshot | None]


@dataclass(frozen=True, slots=True)
class StageRunner:
    run: Callable[[AcceptContext], Awaitable[StageOutcome]]
    preflight: Callable[[Lab], None] | None = None


def _judged(
    evaluate: Callable[[AcceptContext], Awaitable[StageResult]],
) -> Callable[[AcceptContext], Awaitable[StageOutcome]]:
    """A stage that judges answers: its result, and no snapshot of load."""
    async def run(ctx: AcceptContext) -> StageOutcome:
        return await evaluate(ctx), None
    return run


async def _tokenizer(ctx: AcceptContext) -> StageOutcome:
    return tokenizer_stage(ctx), None


def _canary_preflight(lab: Lab) -> None:
    if gateway_canary_configured(lab):
        find_haproxy()  # the canary runs through HAProxy: missing is bad input before any server starts


RUNNERS: Final[dict[str, StageRunner]] = {
    TOKENIZER_ALIGNMENT: StageRunner(_tokenizer),
    GOLDEN: StageRunner(_judged(golden_stage)),
    EQUIVALENCE: StageRunner(_judged(equivalence_stage)),
    STRUCTURED: StageRunner(_judged(structured_stage)),
    LATENCY_CURVE: StageRunner(latency_stage),
    STRESS: StageRunner(stress_stage),
    CANARY: StageRunner(canary_stage, preflight=_canary_preflight),
}

_missing = [s for s in STAGE_ORDER if s not in RUNNERS] + [f"{s} (not in STAGES)" for s in RUNNERS if s not in STAGE_ORDER]
if _missing:
    raise RuntimeError(f"accept stages without a runner: {', '.join(_missing)}")
