"""Every number a user gives has a documented range; values beyond it are exit 2 at load, in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from speclab.model import limits as L
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.gates import Gates, load_gates
from speclab.model.lab import Lab, load_lab
from speclab.model.loading import load_jsonl
from speclab.model.scenario import PromptItem, Scenario, load_scenario
from speclab.traffic.schedule import build_plan

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "speclab" / "bundled"


@pytest.mark.parametrize("model", [Scenario, PromptItem, Lab, Gates])
def test_every_numeric_field_has_a_lower_and_an_upper_bound(model: type) -> None:
    unbounded = [(path, lo, hi) for path, _, lo, hi in L.numeric_fields(model) if lo is None or hi is None]
    assert unbounded == []


def test_the_documented_ranges_are_the_models() -> None:
    assert L.range_table() in (ROOT / "docs" / "limits.md").read_text()


def _scenario(tmp_path: Path, text: str) -> Path:
    base = (BUNDLED / "scenarios" / "smoke.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(base.replace(*text.split("|")))
    return path


@pytest.mark.parametrize(("change", "expected"), [
    ("rate = 5|rate = inf", "arrival.rate: expected a number greater than 0 and at most 10000, got inf"),
    ("rate = 5|rate = 1e9", "arrival.rate: expected a number greater than 0 and at most 10000, got 1000000000.0"),
    ("requests = 20|duration_s = 1e12", "duration_s: expected a number greater than 0 and at most 2592000, got 1000000000000.0"),
    ("stall_timeout_s = 15|stall_timeout_s = inf",
     "stall_timeout_s: expected a number greater than 0 and at most 3600, got inf"),
    ("max_tokens = 24|max_tokens = 10000000",
     "classes.factual_qa.max_tokens: expected an integer greater than 0 and at most 262144, got 10000000"),
])
def test_scenario_values_without_sense_are_refused(tmp_path: Path, change: str, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        load_scenario(_scenario(tmp_path, change))
    assert caught.value.exit_code == ExitCode.BAD_INPUT
    assert str(caught.value).endswith(expected), str(caught.value)


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("num_speculative_tokens = 4", "num_speculative_tokens = 1000",
     "variants[2].num_speculative_tokens: expected an integer at least 1 and at most 64, got 1000"),
    ("max_num_seqs = 64", "max_num_seqs = 1e18",
     "server.max_num_seqs: expected an integer at least 1 and at most 65536, got 1e+18"),
])
def test_lab_values_without_sense_are_refused(tmp_path: Path, old: str, new: str, expected: str) -> None:
    text = (BUNDLED / "labs" / "default.toml").read_text()
    assert old in text
    path = tmp_path / "lab.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError) as caught:
        load_lab(path)
    assert str(caught.value).endswith(expected), str(caught.value)


def test_gates_values_without_sense_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "gates.toml"
    path.write_text("[stress]\nconcurrency = 100000000\n")
    with pytest.raises(InputError, match=r"stress.concurrency: expected an integer at least 1 and at most 10000, got 100000000"):
        load_gates(path)


@pytest.mark.parametrize(("kw", "expected"), [
    ({"rate": float("inf")}, "--rate: expected a number greater than 0 and at most 10000, got inf"),
    ({"rate": 1e9}, "--rate: expected a number greater than 0 and at most 10000, got 1000000000.0"),
    ({"duration_s": 1e12}, "--duration: expected a number greater than 0 and at most 2592000, got 1000000000000.0"),
    ({"concurrency": 100_000_000}, "--concurrency: expected a number at least 1 and at most 10000, got 100000000"),
    ({"rate": float("nan")}, "--rate: expected a number greater than 0 and at most 10000, got nan"),
])
def test_options_without_sense_are_refused(kw: dict[str, float], expected: str) -> None:
    with pytest.raises(InputError) as caught:
        build_plan(load_scenario("smoke"), **kw)  # type: ignore[arg-type]
    assert str(caught.value) == expected


def test_an_oversized_prompt_line_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "x" * (L.MAX_PROMPT_CHARS + 200_000)}) + "\n"
                       + json.dumps({"prompt": "a short one"}) + "\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "big"\nrequests = 5\n[arrival]\nprocess = "constant"\nrate = 1\n'
                        '[classes.c]\nprompts_file = "p.jsonl"\n')
    started = time.perf_counter()
    with pytest.raises(InputError) as caught:
        load_scenario(scenario)
    assert "p.jsonl:1: 1,200,014 characters; a line may have at most 1,065,536" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert time.perf_counter() - started < 60  # generous: the point is that it is refused, not parsed


def test_inline_prompts_and_message_lists_have_the_same_limit(tmp_path: Path) -> None:
    big = "y" * (L.MAX_PROMPT_CHARS // 2 + 1)
    with pytest.raises(ValueError, match="1,000,002 characters of content; a prompt may have at most 1,000,000"):
        PromptItem.model_validate({"messages": [{"role": "user", "content": big}, {"role": "user", "content": big}]})
    with pytest.raises(ValueError, match="at most 1000000 characters"):
        PromptItem.model_validate({"prompt": "z" * (L.MAX_PROMPT_CHARS + 1)})


def test_a_prompts_file_over_its_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "hello"}) + "\n")
    with pytest.raises(InputError, match=r"p.jsonl: larger than 10 bytes \(the limit for a prompts or golden-set file; "):
        load_jsonl(path, PromptItem, max_bytes=10)
