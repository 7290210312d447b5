"""The accept stage registry is the one list of stages: the runners, the gates tables and the docs agree with it."""

from __future__ import annotations

import re
from pathlib import Path

from speclab.gates.stages import STAGE_EXIT_CODES, STAGE_ORDER, STAGES, StageSpec, _check
from speclab.model.exit_codes import ExitCode
from speclab.model.gates import SECTIONS, GateProfile
from speclab.session.accept import selected_stages
from speclab.session.accept_stages import RUNNERS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_stage_has_a_runner_and_its_own_exit_code() -> None:
    assert list(RUNNERS) == list(STAGE_ORDER)
    assert len(set(STAGE_EXIT_CODES.values())) == len(STAGES)
    assert all(isinstance(code, ExitCode) and 10 <= code < 100 for code in STAGE_EXIT_CODES.values())
    assert all(s.section is None or s.section in SECTIONS for s in STAGES)
    assert selected_stages(("canary", "golden")) == ("golden", "canary")


def test_error_allowances_read_their_own_gate() -> None:
    profile = GateProfile(name="t").model_copy(update={
        "stress": GateProfile(name="t").stress.model_copy(update={"max_error_rate_pct": 3.0}),
        "canary": GateProfile(name="t").canary.model_copy(update={"max_error_rate_pct": 2.0}),
    })
    allowed = {s.name: s.allowed_error_pct(profile) for s in STAGES}
    assert allowed == {**dict.fromkeys(STAGE_ORDER, 0.0), "stress": 3.0, "canary": 2.0}


def test_a_broken_registry_is_refused() -> None:
    twice = (StageSpec("a", ExitCode.GOLDEN_SET, "a", None), StageSpec("b", ExitCode.GOLDEN_SET, "b", "nope"))
    try:
        _check(twice)
    except RuntimeError as error:
        assert "exit code 11 used by two stages" in str(error) and "no gates table 'nope'" in str(error)
    else:
        raise AssertionError("a duplicated exit code was accepted")


def test_every_stage_is_documented() -> None:
    measurements = " ".join((DOCS / "measurements.md").read_text().split())
    for stage in STAGES:
        assert f"{int(stage.exit_code)} {stage.title}" in measurements, stage.name
    formats = " ".join((DOCS / "file-formats.md").read_text().split())
    listed = re.search(r"The stages run in this order: (.*?) \(", formats)
    assert listed is not None
    assert [s.strip(" `") for s in listed.group(1).split(",")] == list(STAGE_ORDER)
