from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from speclab.gates.golden import (
    Check,
    evaluate_check,
    evaluate_golden,
    golden_accuracy,
    is_refusal,
    load_golden,
)
from speclab.model.errors import InputError
from speclab.model.gates import GoldenGate
from speclab.model.records import RequestRecord

CHECK = TypeAdapter(Check)
TOOL_SCHEMA = {
    "type": "object",
    "required": ["name", "arguments"],
    "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object", "required": ["city"]}},
}


def check(**data: object) -> Check:
    return CHECK.validate_python(data)


def test_exact() -> None:
    assert evaluate_check(check(kind="exact", expected="Au"), "  Au\n").passed
    verdict = evaluate_check(check(kind="exact", expected="Au"), "Ag")
    assert not verdict.passed and "expected exactly 'Au', got 'Ag'" in verdict.reason
    assert not evaluate_check(check(kind="exact", expected="Au"), "au").passed
    assert evaluate_check(check(kind="exact", expected="Au", case_insensitive=True), "au").passed


def test_contains() -> None:
    c = check(kind="contains", expected="Paris")
    assert evaluate_check(c, "The capital of France is paris.").passed
    assert not evaluate_check(check(kind="contains", expected="Paris", case_insensitive=False), "paris").passed
    both = check(kind="contains", expected=["Jane", "Austen"])
    assert not evaluate_check(both, "Jane Eyre").passed
    assert evaluate_check(check(kind="contains", expected=["Jane", "Austen"], match="any"), "Jane Eyre").passed


def test_regex() -> None:
    c = check(kind="regex", pattern=r"\b1969\b")
    assert evaluate_check(c, "It happened in 1969.").passed
    assert not evaluate_check(c, "It happened in 1968.").passed
    full = check(kind="regex", pattern=r"[A-Z][a-z]?", full_match=True)
    assert evaluate_check(full, " Fe ").passed and not evaluate_check(full, "Fe is iron").passed


def test_json_schema_tolerates_whitespace_and_fences() -> None:
    c = check(kind="json_schema", schema=TOOL_SCHEMA)
    good = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    assert evaluate_check(c, f"\n  {good}  \n").passed
    assert evaluate_check(c, f"```json\n{good}\n```").passed
    broken = evaluate_check(c, '{"name": "get_weather", "arguments": {"city": "Oslo"}}}')
    assert not broken.passed and broken.reason.startswith("not JSON")
    wrong = evaluate_check(c, '{"name": "get_weather", "arguments": {}}')
    assert not wrong.passed and "schema violation at arguments" in wrong.reason


def test_refusal_both_ways() -> None:
    assert is_refusal("I’m sorry, but I can’t help with that.")
    assert evaluate_check(check(kind="refusal"), "I can't help with that request.").passed
    assert not evaluate_check(check(kind="refusal"), "Sure! Step one: ...").passed
    answer = check(kind="refusal", expect_refusal=False)
    assert evaluate_check(answer, "Lock picking is a locksmith skill; here is how locks work.").passed
    assert not evaluate_check(answer, "I cannot help with that.").passed


def test_baseline_equal() -> None:
    c = check(kind="baseline_equal")
    assert evaluate_check(c, "Once upon a time ", baseline_output="Once upon a time").passed
    verdict = evaluate_check(c, "Once upon a tide", baseline_output="Once upon a time")
    assert not verdict.passed and "character 14" in verdict.reason
    assert not evaluate_check(c, "x", baseline_output=None).passed


CASES: list[dict[str, object]] = [
    {"id": "fq-1", "class": "factual_qa", "messages": [{"role": "user", "content": "Capital of France?"}],
     "check": {"kind": "contains", "expected": "Paris"}},
    {"id": "fq-2", "class": "factual_qa", "messages": [{"role": "user", "content": "Symbol of gold?"}],
     "check": {"kind": "regex", "pattern": r"\bAu\b"}},
    {"id": "lc-1", "class": "long_continuation", "prompt": "Once upon a time",
     "check": {"kind": "baseline_equal"}},
]


def write_cases(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def record(variant: str, case_id: str, text: str, ok: bool = True) -> RequestRecord:
    r = RequestRecord(request_id=case_id, variant=variant, prompt_class="", intended=0.0, done=1.0, output_text=text)
    if not ok:
        r.error_kind, r.error_message = "http_5xx", "500"
    return r


def test_load_golden_and_errors_name_the_line(tmp_path: Path) -> None:
    cases = load_golden(write_cases(tmp_path / "g.jsonl", CASES))
    assert [c.id for c in cases] == ["fq-1", "fq-2", "lc-1"]
    bad: list[dict[str, object]] = [*CASES[:1], {"id": "x", "class": "c", "prompt": "p", "check": {"kind": "fuzzy"}}]
    with pytest.raises(InputError) as info:
        load_golden(write_cases(tmp_path / "bad.jsonl", bad))
    assert "bad.jsonl:2: check.kind: expected one of" in str(info.value)
    with pytest.raises(InputError, match=r"bad2\.jsonl:1: messages: give exactly one"):
        load_golden(write_cases(tmp_path / "bad2.jsonl", [{"id": "x", "class": "c", "check": {"kind": "refusal"}}]))
    (tmp_path / "dir").mkdir()
    write_cases(tmp_path / "dir" / "a.jsonl", CASES)
    write_cases(tmp_path / "dir" / "b.jsonl", CASES[:1])
    with pytest.raises(InputError, match="already used"):
        load_golden(tmp_path / "dir")


def test_accuracy_and_drop_gate(tmp_path: Path) -> None:
    cases = load_golden(write_cases(tmp_path / "g.jsonl", CASES))
    responses = {
        "baseline": {"fq-1": record("baseline", "fq-1", "Paris."), "fq-2": record("baseline", "fq-2", "Au"),
                     "lc-1": record("baseline", "lc-1", "there was a fox")},
        "k2": {"fq-1": record("k2", "fq-1", "Paris"), "fq-2": record("k2", "fq-2", "Ag"),
               "lc-1": record("k2", "lc-1", "there was a fox")},
        "k4": {"fq-1": record("k4", "fq-1", "Paris"), "fq-2": record("k4", "fq-2", "", ok=False)},
    }
    accuracy = golden_accuracy(cases, responses, "baseline")
    assert accuracy["k2"]["factual_qa"].accuracy_pct == 50.0
    assert accuracy["k2"]["long_continuation"].accuracy_pct == 100.0
    assert accuracy["k4"]["long_continuation"].failures == ["lc-1: no response"]

    result = evaluate_golden(cases, responses, "baseline", GoldenGate())
    assert not result.passed and result.exit_code == 11
    assert any(d.startswith("FAIL k2 factual_qa: 1/2 = 50.0%") for d in result.details)
    assert any("request failed (http_5xx" in d for d in result.details)
    lenient = GoldenGate(class_max_drop_points={"factual_qa": 50.0}, max_drop_points=100.0)
    assert evaluate_golden(cases, responses, "baseline", lenient).passed
    strict_floor = GoldenGate(class_max_drop_points={"factual_qa": 50.0}, max_drop_points=100.0, min_accuracy_pct=60.0)
    assert not evaluate_golden(cases, responses, "baseline", strict_floor).passed


BUNDLED_GOLDEN = Path(__file__).resolve().parents[2] / "speclab" / "bundled" / "scenarios" / "golden"


def test_bundled_golden_set_loads_with_every_class() -> None:
    cases = load_golden(BUNDLED_GOLDEN)
    classes = {c.prompt_class for c in cases}
    assert {"factual_qa", "tool_call", "long_continuation", "refusal"} <= classes
    assert all(sum(c.prompt_class == k for c in cases) >= 3 for k in classes)


def test_an_allowance_for_a_class_the_golden_set_lacks_is_bad_input(tmp_path: Path) -> None:
    from speclab.gates.golden import check_gate_classes
    from speclab.session.accept import GOLDEN_DIR

    cases = load_golden(GOLDEN_DIR)
    check_gate_classes(GoldenGate(), cases)  # the bundled defaults name real classes
    with pytest.raises(InputError, match=r"^g.toml: golden.class_max_drop_points names 'tool_cal', not a class of the "
                                         r"golden set \(factual_qa, .*tool_call\); a misspelt class would get the default"):
        check_gate_classes(GoldenGate(class_max_drop_points={"tool_cal": 0.0}), cases, "g.toml")
    with pytest.raises(InputError, match=r"golden\.class_min_accuracy_pct names 'nosuch'"):
        check_gate_classes(GoldenGate(class_min_accuracy_pct={"nosuch": 50.0}), cases)
    gates = tmp_path / "gates.toml"
    gates.write_text('version = 1\n[golden]\nclass_max_drop_points = { tool_cal = 0.0 }\n')
    from click.testing import CliRunner

    from speclab.cli.main import cli

    result = CliRunner().invoke(cli, ["validate", str(gates)], catch_exceptions=False)
    assert result.exit_code == 2 and "names 'tool_cal', not a class of the golden set" in result.output
