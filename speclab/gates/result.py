"""The outcome of one acceptance stage, with the exit code its entry in ``stages.STAGES`` gives it.

Every evaluation function in ``speclab.gates`` returns a ``StageResult`` so the accept
orchestration, the reports and the JUnit writer treat all stages alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from speclab.model.exit_codes import ExitCode

from .stages import (
    CANARY,
    EQUIVALENCE,
    GOLDEN,
    LATENCY_CURVE,
    STAGE_EXIT_CODES,
    STAGE_ORDER,
    STRESS,
    STRUCTURED,
    TOKENIZER_ALIGNMENT,
)

__all__ = [
    "CANARY", "EQUIVALENCE", "GOLDEN", "LATENCY_CURVE", "STAGE_EXIT_CODES", "STAGE_ORDER", "STRESS", "STRUCTURED",
    "TOKENIZER_ALIGNMENT", "StageResult",
]


@dataclass(frozen=True, slots=True)
class StageResult:
    """``exit_code`` is 0 when passed, else the stage's code; ``details`` are readable lines."""

    stage: str
    passed: bool
    exit_code: int
    summary: str
    details: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False

    @classmethod
    def of(
        cls,
        stage: str,
        failures: list[str],
        summary: str,
        details: list[str],
        metrics: dict[str, Any] | None = None,
    ) -> StageResult:
        """Passed when ``failures`` is empty; failures lead the details so they are read first."""
        passed = not failures
        return cls(
            stage=stage,
            passed=passed,
            exit_code=int(ExitCode.OK if passed else STAGE_EXIT_CODES[stage]),
            summary=summary,
            details=[*(f"FAIL {line}" for line in failures), *details],
            metrics=dict(metrics or {}),
        )

    @classmethod
    def skip(cls, stage: str, reason: str) -> StageResult:
        return cls(stage=stage, passed=True, exit_code=int(ExitCode.OK), summary=reason, skipped=True)

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else "passed" if self.passed else "failed"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status
        return data
