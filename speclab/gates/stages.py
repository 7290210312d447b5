"""The accept stages, one entry each, in the checklist's order: what a stage is called, its exit code,
how a report titles it, which gates table holds its thresholds and how it is run.

Everything that lists the stages derives from ``STAGES``: the order ``accept`` runs them in, the
``--stages`` choices, the exit codes of a failed gate, the titles of an unanswered stage, the
release note's gate table. The session binds each name to the runner that sends its traffic
(``speclab.session.accept_stages``); a stage without a runner is refused when that module loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from speclab.model.exit_codes import ExitCode
from speclab.model.gates import SECTIONS, GateProfile

TOKENIZER_ALIGNMENT: Final = "tokenizer_alignment"
GOLDEN: Final = "golden"
EQUIVALENCE: Final = "equivalence"
STRUCTURED: Final = "structured"
LATENCY_CURVE: Final = "latency_curve"
STRESS: Final = "stress"
CANARY: Final = "canary"


def _no_errors(_: GateProfile) -> float:
    return 0.0


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One accept stage. ``section`` names its table in ``gates.toml`` (None: no thresholds);
    ``speed`` stages measure a speed-up and are skipped on a misaligned tokenizer pair;
    ``needs_servers`` False runs before any server starts; ``allowed_error_pct`` is the share of
    unanswered requests the stage's own gate tolerates (a dead server is never tolerated)."""

    name: str
    exit_code: ExitCode
    title: str
    section: str | None
    speed: bool = False
    needs_servers: bool = True
    allowed_error_pct: Callable[[GateProfile], float] = _no_errors


STAGES: Final[tuple[StageSpec, ...]] = (
    StageSpec(TOKENIZER_ALIGNMENT, ExitCode.TOKENIZER_ALIGNMENT, "tokenizer alignment", None, needs_servers=False),
    StageSpec(GOLDEN, ExitCode.GOLDEN_SET, "golden set", "golden"),
    StageSpec(EQUIVALENCE, ExitCode.EQUIVALENCE, "equivalence", "equivalence"),
    StageSpec(STRUCTURED, ExitCode.STRUCTURED_OUTPUT, "structured output", "structured"),
    StageSpec(LATENCY_CURVE, ExitCode.LATENCY_CURVE, "latency curve", "latency", speed=True),
    StageSpec(STRESS, ExitCode.CONCURRENCY_STRESS, "concurrency stress", "stress", speed=True,
              allowed_error_pct=lambda p: p.stress.max_error_rate_pct),
    StageSpec(CANARY, ExitCode.CANARY, "canary", "canary",
              allowed_error_pct=lambda p: p.canary.max_error_rate_pct),
)

BY_NAME: Final[dict[str, StageSpec]] = {s.name: s for s in STAGES}
STAGE_ORDER: Final[tuple[str, ...]] = tuple(s.name for s in STAGES)
STAGE_EXIT_CODES: Final[dict[str, ExitCode]] = {s.name: s.exit_code for s in STAGES}


def spec(name: str) -> StageSpec:
    return BY_NAME[name]


def _check(stages: tuple[StageSpec, ...]) -> None:
    """A registry mistake is a programming error, caught on import rather than in a CI run."""
    names = [s.name for s in stages]
    codes = [s.exit_code for s in stages]
    problems = [f"stage {n!r} listed twice" for n in set(names) if names.count(n) > 1]
    problems += [f"exit code {int(c)} used by two stages" for c in set(codes) if codes.count(c) > 1]
    problems += [f"stage {s.name!r}: no gates table {s.section!r}" for s in stages
                 if s.section is not None and s.section not in SECTIONS]
    if problems:
        raise RuntimeError("accept stage registry: " + "; ".join(problems))


_check(STAGES)
