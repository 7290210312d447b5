from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from speclab.gates.junit import write_junit
from speclab.gates.result import GOLDEN, STAGE_ORDER, STRUCTURED, TOKENIZER_ALIGNMENT, StageResult
from speclab.model.errors import InputError
from speclab.model.gates import Gates, load_gates
from speclab.model.paths import BUNDLED


def test_stage_result_exit_codes() -> None:
    assert STAGE_ORDER[0] == TOKENIZER_ALIGNMENT and len(STAGE_ORDER) == 7
    failed = StageResult.of(STRUCTURED, ["k2 tool_call: 2.00%"], "structured output: 1 failed", ["baseline ok"])
    assert (failed.passed, failed.exit_code, failed.details) == (False, 13, ["FAIL k2 tool_call: 2.00%", "baseline ok"])
    assert StageResult.of(GOLDEN, [], "ok", []).exit_code == 0
    assert StageResult.skip("canary", "not run").to_dict()["status"] == "skipped"


def test_junit_is_well_formed(tmp_path: Path) -> None:
    results = [
        StageResult.of(TOKENIZER_ALIGNMENT, [], "tokenizers aligned", ["vocabulary: 10 tokens"]),
        StageResult.of(GOLDEN, ["k2 factual_qa: 50.0% <drop> & more"], "golden set: 1 class gates failed", []),
        StageResult.skip(STRUCTURED, "not run: an earlier stage failed"),
    ]
    path = write_junit(results, tmp_path / "out" / "junit.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [TOKENIZER_ALIGNMENT, GOLDEN, STRUCTURED]
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == "golden set: 1 class gates failed"
    assert failure.text == "FAIL k2 factual_qa: 50.0% <drop> & more"
    assert cases[2].find("skipped") is not None and cases[0].find("failure") is None
    out = cases[0].find("system-out")
    assert out is not None and out.text == "tokenizers aligned\nvocabulary: 10 tokens"


def test_bundled_gates_profiles() -> None:
    gates = load_gates()
    assert set(gates.profiles) == {"quick", "release"}
    quick, release = gates.profile("quick"), gates.profile("release")
    assert quick.equivalence.samples < release.equivalence.samples
    assert quick.structured.max_failure_rate_pct == 1.0 and quick.structured.max_delta_points == 0.5
    assert quick.golden.drop_allowed("factual_qa") == 0.0 and quick.golden.drop_allowed("tool_call") == 0.0
    assert gates.profile().name == "quick"
    assert gates.profile("quick", {"equivalence": {"samples": 30}}).equivalence.samples == 30
    with pytest.raises(InputError, match="no profile 'nightly'"):
        gates.profile("nightly")
    with pytest.raises(InputError, match=r"profiles\.quick\.latency\.max_p99_ratio"):
        gates.profile("quick", {"latency": {"max_p99_ratio": 0}})
    with pytest.raises(InputError, match="unknown stage 'latncy'"):
        gates.profile("quick", {"latncy": {}})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gates.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[structured]\nmax_failure_rate_pct = 150\n", "structured.max_failure_rate_pct: expected"),
        ('[equivalence]\nmode = "greedyy"\n', "equivalence.mode: expected one of"),
        ("[latency]\nconcurrency = []\n", "latency.concurrency: expected"),
        ("[canary]\nmax_rejection_rate = 5\n", "canary.max_rejection_rate: unknown key"),
        ("[profiles.quick.stress]\nconcurrency = 0\n", "profiles.quick.stress.concurrency: expected"),
        ('default_profile = "release"\n[profiles.quick]\n', "default_profile 'release' is not one of the profiles"),
        ("[golden\n", "line 1"),
    ],
)
def test_gates_validation_errors_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        load_gates(write(tmp_path, text))
    assert expected in str(info.value)
    assert "gates.toml" in str(info.value)


def test_defaults_without_profiles() -> None:
    gates = Gates()
    assert gates.profile().name == "quick" and gates.profile().latency.concurrency == [1, 2, 4]
    assert (BUNDLED / "gates.toml").is_file()


def test_junit_that_cannot_be_written_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    target = tmp_path / "a-file" / "junit.xml"
    with pytest.raises(InputError, match=r"a-file/junit\.xml: cannot write the JUnit XML: ") as caught:
        write_junit([StageResult.of(GOLDEN, [], "ok", [])], target)
    assert caught.value.exit_code == 2
