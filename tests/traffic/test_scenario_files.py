"""Scenario files: validation errors name the file, the field and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.scenario import load_scenario
from speclab.traffic.schedule import build_plan

BASE = """
seed = 1
duration_s = 10
[arrival]
process = "poisson"
rate = 2
[classes.qa]
prompts = ["a", "b"]
"""


def _write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    return str(info.value)


def test_bad_rate_names_file_field_and_expectation(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("rate = 2", 'rate = "fast"'))
    message = _error(path)
    assert message.endswith("x.toml: arrival.rate: expected a number greater than 0 and at most 10000, got 'fast'")


@pytest.mark.parametrize(("value", "got"), [("true", "True"), ('"2"', "'2'")])
def test_a_boolean_or_a_quoted_number_is_not_taken_for_a_number(tmp_path: Path, value: str, got: str) -> None:
    message = _error(_write(tmp_path, BASE.replace("rate = 2", f"rate = {value}")))
    assert message.endswith(f"x.toml: arrival.rate: expected a number greater than 0 and at most 10000, got {got}")
    (tmp_path / "p.jsonl").write_text('{"prompt": "ok", "max_tokens": "9"}\n')  # a prompts file's line alike
    message = _error(_write(tmp_path, BASE.replace('prompts = ["a", "b"]', 'prompts_file = "p.jsonl"')))
    assert "p.jsonl:1: max_tokens: expected" in message and "got '9'" in message
    assert load_scenario(_write(tmp_path, BASE.replace("rate = 2", "rate = 2.5"))).arrival.rate == 2.5  # still a number


def test_unknown_key_suggests_the_known_one(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, BASE.replace("duration_s", "duraton_s")))
    assert "duraton_s: unknown key; did you mean 'duration_s'?" in message


def test_every_problem_gets_a_line(tmp_path: Path) -> None:
    text = BASE.replace("rate = 2", "rate = 0") + '\n[classes.b]\nweight = -1\nendpoint = "chta"\nprompts = ["x"]\n'
    lines = _error(_write(tmp_path, text)).splitlines()
    assert any("arrival.rate: expected a number greater than 0 and at most 10000, got 0" in x for x in lines)
    assert any("classes.b.weight: expected a number greater than 0 and at most 1000000, got -1" in x for x in lines)
    assert any("classes.b.endpoint: expected one of 'chat', 'completions', got 'chta'; did you mean 'chat'?" in x
               for x in lines)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("prompts = [\"a\", \"b\"]", "temperature = 0"), "classes.qa.prompts: give prompts (a list) or prompts_file"),
        (("rate = 2", "concurrency = 4"), "arrival.rate: required for process 'poisson'"),
        (("rate = 2", "rate = 2\nconcurrency = 3"), "arrival.concurrency: not used by process 'poisson'"),
        (("process = \"poisson\"\nrate = 2", "process = \"steps\"\nsteps = []"), "arrival.steps: expected at least one step"),
        (("process = \"poisson\"\nrate = 2",
          "process = \"steps\"\nsteps = [{rate = 1, duration_s = 1}, {concurrency = 2, duration_s = 1}]"),
         "arrival.steps: mix of rate and concurrency steps"),
        (("process = \"poisson\"\nrate = 2", "process = \"steps\"\nsteps = [{rate = 1, concurrency = 2, duration_s = 1}]"),
         "arrival.steps[0]: give exactly one of rate or concurrency"),
        (("duration_s = 10", "warmup_s = 1"), "duration_s: give duration_s or requests"),
        (("duration_s = 10", "duration_s = 10\nwarmup_s = 12"), "warmup_s: must be shorter than the run"),
    ],
)
def test_semantic_errors_name_the_field(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    assert change[0] in BASE
    message = _error(_write(tmp_path, BASE.replace(*change)))
    assert f"x.toml: {expected}" in message


def test_toml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, "seed = 1\n[arrival\nprocess = 1\n"))
    assert "x.toml: line 2, column" in message and "invalid TOML" in message
    assert "\n" not in message


def test_prompts_file_relative_to_scenario_with_class_filter(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    lines = [
        {"messages": [{"role": "user", "content": "q1"}], "class": "qa", "max_tokens": 9, "id": "capital-fr"},
        {"prompt": "other", "class": "tool"},
        {"prompt": "q2", "schema": {"type": "object"}},
    ]
    (tmp_path / "p" / "all.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    path = _write(tmp_path, BASE.replace('prompts = ["a", "b"]', 'prompts_file = "p/all.jsonl"'))
    scenario = load_scenario(path)
    assert scenario.name == "x"
    items = scenario.classes["qa"].items()
    assert [i.as_text() for i in items] == ["q1", "q2"]
    assert items[0].max_tokens == 9 and items[1].schema_ == {"type": "object"}
    table = list(build_plan(scenario).prompt_items())  # what the recording's prompts.jsonl holds
    assert [(t["ref"], t.get("id")) for t in table] == [("qa/0", "capital-fr"), ("qa/1", None)]


def test_prompts_file_errors_have_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n{"prompt": 3}\nnot json\n{"messages": []}\n')
    path = _write(tmp_path, BASE.replace('prompts = ["a", "b"]', 'prompts_file = "bad.jsonl"'))
    message = _error(path)
    assert "classes.qa.prompts_file" in message
    assert "bad.jsonl:2: prompt: expected a string, got 3" in message
    assert "bad.jsonl:3: invalid JSON" in message
    assert "bad.jsonl:4: messages: expected a list of tables with at least 1 item" in message


def test_missing_prompts_file(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace('prompts = ["a", "b"]', 'prompts_file = "nope.jsonl"'))
    assert "nope.jsonl: no such file" in _error(path)


@pytest.mark.parametrize("name", ["smoke", "mixed", "burst", "ladder"])
def test_bundled_scenarios_load_and_plan(name: str) -> None:
    scenario = load_scenario(name)
    plan = build_plan(scenario)
    assert plan.classes
    first = plan.request(0)
    assert first.sampling["max_tokens"] <= 160
    if name == "mixed":
        assert {c.name for c in plan.classes} == {"factual_qa", "tool_call", "long_continuation", "refusal"}
        assert all(c.sampling.get("temperature") == 0 for c in plan.classes)
        tool = next(c for c in plan.classes if c.name == "tool_call")
        assert all(item["schema"] for item in tool.items)
    if name == "ladder":
        assert plan.mode == "closed"
        assert [n for _, n in plan.concurrency_steps] == [1, 4, 16, 64]


def test_union_errors_point_at_the_deepest_problem(tmp_path: Path) -> None:
    text = BASE.replace('prompts = ["a", "b"]', 'prompts = [[{role = "usr", content = "x"}]]\nstop = "END"')
    lines = _error(_write(tmp_path, text)).splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("classes.qa.prompts[0][0].role: expected one of 'system', 'user', 'assistant', "
                             "got 'usr'; did you mean 'user'?")
