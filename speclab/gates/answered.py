"""Were a stage's requests answered? Checked before any gate judges accuracy, schemas or latency.

A crashed server, 5xx answers, stalled or malformed streams are not wrong answers and not slow
answers: they are no answers. A stage whose requests were not all answered fails with its own
exit code and a one-line summary that names the cause ("k4: server exited (engine crashed ...)
after 40 answered requests; 352 connect errors"), never a misleading "0/0 failed" or accuracy drop.
Stages whose gate tolerates an error rate (stress, canary) keep that tolerance, except for a
server that died.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from speclab.model.names import ErrorKind
from speclab.model.records import RequestRecord

from .result import StageResult
from .stages import spec

# What each kind is called in a summary: "3 stalled (no chunk for 30 s)".
_PHRASES: dict[str, str] = {
    ErrorKind.CONNECT.value: "connect errors",
    ErrorKind.HTTP_5XX.value: "HTTP 5xx answers",
    ErrorKind.HTTP_429.value: "HTTP 429 answers",
    ErrorKind.HTTP_4XX.value: "HTTP 4xx answers",
    ErrorKind.TIMEOUT.value: "timed out",
    ErrorKind.STALL.value: "stalled",
    ErrorKind.MALFORMED_STREAM.value: "malformed streams",
    ErrorKind.STREAM_ERROR_EVENT.value: "error events in the stream",
    ErrorKind.TRUNCATED.value: "streams cut before [DONE]",
    ErrorKind.CANCELLED.value: "cancelled",
}


@dataclass(frozen=True, slots=True)
class ServerState:
    """How a variant's server stands after the stage: ``exited`` is one line from its log, or None."""

    exited: str | None = None


@dataclass(slots=True)
class _Answers:
    sent: int = 0
    ok: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # error kind -> count, in the order first seen
    examples: dict[str, str] = field(default_factory=dict)  # error kind -> its first message


class AnsweredTally:
    """What the check needs of a stage's records, summed as they arrive: per variant the requests
    sent and answered, the errors by kind and each kind's first message. A load stage feeds it as
    its records stream past, so nothing per request is kept for the check."""

    def __init__(self) -> None:
        self.by_variant: dict[str, _Answers] = {}

    def add(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            row = self.by_variant.setdefault(record.variant, _Answers())
            row.sent += 1
            row.ok += record.ok
            if record.error_kind is not None:
                kind = str(record.error_kind)
                row.kinds[kind] += 1
                if record.error_message and kind not in row.examples:
                    row.examples[kind] = record.error_message

    @property
    def total(self) -> int:
        return sum(row.sent for row in self.by_variant.values())

    def error_kinds(self) -> dict[str, set[str]]:
        """Per variant, the kinds of error its requests met."""
        return {v: set(row.kinds) for v, row in self.by_variant.items() if row.kinds}


def _variant_line(variant: str, row: _Answers, state: ServerState | None, answered_before: int) -> str:
    parts: list[str] = []
    for kind, count in row.kinds.most_common():
        example = row.examples.get(kind, "")
        parts.append(f"{count} {_PHRASES.get(kind, kind)}" + (f" ({example[:120]})" if example else ""))
    body = "; ".join(parts)
    if state is not None and state.exited:
        answered = answered_before + row.ok
        return f"{variant} server exited after {answered} answered requests ({state.exited})" + (f"; {body}" if body else "")
    return f"{variant}: {row.kinds.total()} of {row.sent} requests not answered: {body}"


def check_answered(
    stage: str,
    records: AnsweredTally | Iterable[RequestRecord],
    *,
    states: Mapping[str, ServerState] | None = None,
    answered_before: Mapping[str, int] | None = None,
    allowed_error_pct: float = 0.0,
) -> list[str]:
    """One line per variant whose requests were not all answered (empty: every request answered).

    ``records`` are the stage's, or their ``AnsweredTally``; ``answered_before`` counts a variant's
    answered requests in earlier stages, so a crash reads "after N answered requests" over the
    whole run; ``allowed_error_pct`` is the stage gate's own tolerance (a dead server is never tolerated).
    """
    if isinstance(records, AnsweredTally):
        tally = records
    else:
        tally = AnsweredTally()
        tally.add(records)
    states = states or {}
    answered_before = answered_before or {}
    by_variant = tally.by_variant
    lines: list[str] = []
    for variant in [*by_variant, *(v for v, st in states.items() if st.exited and v not in by_variant)]:
        row = by_variant.get(variant, _Answers())
        failed = row.kinds.total()
        state = states.get(variant)
        dead = state is not None and state.exited is not None
        if not failed and not dead:
            continue
        if not dead and 100.0 * failed / max(row.sent, 1) <= allowed_error_pct:
            continue
        lines.append(_variant_line(variant, row, state, answered_before.get(variant, 0)))
    return lines


def unanswered_result(result: StageResult, lines: list[str]) -> StageResult:
    """The stage's result failed for want of answers: the cause leads, the gate's own lines follow."""
    if not lines or result.skipped:
        return result
    own = [f"on the answered requests: {line.removeprefix('FAIL ')}" for line in result.details]
    failed = StageResult.of(result.stage, lines, f"{spec(result.stage).title}: {'; '.join(lines)}",
                            own, result.metrics)
    return replace(failed, metrics={**result.metrics, "unanswered": lines})
