"""A stage first checks its requests were answered; crashes, 5xx, stalls and broken streams are named."""

from __future__ import annotations

from speclab.gates.answered import ServerState, check_answered, unanswered_result
from speclab.gates.result import CANARY, GOLDEN, STRUCTURED, StageResult
from speclab.model.exit_codes import ExitCode
from speclab.model.records import RequestRecord


def _rec(variant: str, i: int, kind: str | None = None, message: str | None = None) -> RequestRecord:
    return RequestRecord(request_id=f"{variant}-{i}", variant=variant, prompt_class="c", intended=0.0, sent=0.0,
                         done=None if kind else 1.0, error_kind=kind, error_message=message)


def test_all_answered_is_no_failure() -> None:
    records = [_rec("baseline", i) for i in range(5)] + [_rec("k4", i) for i in range(5)]
    assert check_answered(GOLDEN, records) == []


def test_5xx_and_malformed_streams_are_named_per_variant() -> None:
    records = [_rec("k4", i) for i in range(27)]
    records += [_rec("k4", 90, "http_5xx", "HTTP 500: Internal server error"),
                _rec("k4", 91, "malformed_stream", "invalid JSON in an SSE event: Unterminated string")]
    assert check_answered(GOLDEN, records) == [
        "k4: 2 of 29 requests not answered: 1 HTTP 5xx answers (HTTP 500: Internal server error); "
        "1 malformed streams (invalid JSON in an SSE event: Unterminated string)"
    ]


def test_a_dead_server_is_named_with_its_answered_count_over_the_run() -> None:
    records = [_rec("k4", i) for i in range(3)] + [_rec("k4", 10 + i, "connect", "cannot connect") for i in range(352)]
    lines = check_answered(STRUCTURED, records, states={"k4": ServerState(exited="killed by signal 9")},
                           answered_before={"k4": 37})
    assert lines == ["k4 server exited after 40 answered requests (killed by signal 9); 352 connect errors (cannot connect)"]


def test_a_gate_tolerance_applies_except_to_a_dead_server() -> None:
    records = [_rec("k4", i) for i in range(99)] + [_rec("k4", 99, "stall", "no data for 30 s")]
    assert check_answered(CANARY, records, allowed_error_pct=1.0) == []
    assert check_answered(CANARY, records, allowed_error_pct=0.5) == [
        "k4: 1 of 100 requests not answered: 1 stalled (no data for 30 s)"]
    dead = check_answered(CANARY, records, allowed_error_pct=1.0, states={"k4": ServerState(exited="exited with code 1")})
    assert dead and dead[0].startswith("k4 server exited after 99 answered requests (exited with code 1)")


def test_the_result_keeps_the_stage_exit_code_and_names_the_cause() -> None:
    gate = StageResult.of(STRUCTURED, ["k4 tool_call: 0/0 failed = n/a"], "structured output: 1 class gates failed", [])
    result = unanswered_result(gate, ["k4 server exited after 40 answered requests (killed by signal 9); 352 connect errors"])
    assert result.exit_code == ExitCode.STRUCTURED_OUTPUT and not result.passed
    assert result.summary == ("structured output: k4 server exited after 40 answered requests (killed by signal 9); "
                              "352 connect errors")
    assert "0/0" not in result.summary
    assert result.details[0].startswith("FAIL k4 server exited")
    assert result.details[1] == "on the answered requests: k4 tool_call: 0/0 failed = n/a"


def test_a_server_that_died_after_answering_everything_still_fails_the_stage() -> None:
    records = [_rec("k4", i) for i in range(20)]
    lines = check_answered(STRUCTURED, records, states={"k4": ServerState(exited="exited with code 1")},
                           answered_before={"k4": 20})
    assert lines == ["k4 server exited after 40 answered requests (exited with code 1)"]
