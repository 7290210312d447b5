"""The outcome of one acceptance stage, in the order and with the exit codes of docs/measurements.md.

Every evaluation function in ``speclab.gates`` returns a ``StageResult`` so the accept
orchestration, the reports and the JUnit writer treat all stages alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from speclab.model.exit_codes import ExitCode

TOKENIZER_ALIGNMENT: Final = "tokenizer_alignment"
GOLDEN: Final = "golden"
EQUIVALENCE: Final = "equivalence"
STRUCTURED: Final = "structured"
LATENCY_CURVE: Final = "latency_curve"
STRESS: Final = "stress"
CANARY: Final = "canary"

STAGE_ORDER: Final[tuple[str, ...]] = (
    TOKENIZER_ALIGNMENT, GOLDEN, EQUIVALENCE, STRUCTURED, LATENCY_CURVE, STRESS, CANARY,
)

STAGE_EXIT_CODES: Final[dict[str, ExitCode]] = {
    TOKENIZER_ALIGNMENT: ExitCode.TOKENIZER_ALIGNMENT,
    GOLDEN: ExitCode.GOLDEN_SET,
    EQUIVALENCE: ExitCode.EQUIVALENCE,
    STRUCTURED: ExitCode.STRUCTURED_OUTPUT,
    LATENCY_CURVE: ExitCode.LATENCY_CURVE,
    STRESS: ExitCode.CONCURRENCY_STRESS,
    CANARY: ExitCode.CANARY,
}


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
