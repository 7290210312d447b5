"""Each simulator fault is caught by the gate meant for it, with that gate's exit code."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.session import accept_stages
from speclab.session.accept import AcceptOptions, run_accept_stages


async def _accept(tmp_path: Path, lab: str | Path, **kw: Any) -> tuple[ExitCode, dict[str, Any], str]:
    out = io.StringIO()
    code = await run_accept_stages(AcceptOptions(lab=str(lab), engine="sim", report_dir=tmp_path, **kw), out=out)
    return code, json.loads((tmp_path / "report.json").read_text()), out.getvalue()


def _gate(report: dict[str, Any], stage: str) -> dict[str, Any]:
    return next(g for g in report["gates"] if g["stage"] == stage)


async def test_misaligned_tokenizer_fails_alignment_before_any_server(tmp_path: Path) -> None:
    code, report, text = await _accept(tmp_path, "labs/faults/misaligned_tokenizer.toml")
    assert code == ExitCode.TOKENIZER_ALIGNMENT, text
    gate = _gate(report, "tokenizer_alignment")
    assert gate["status"] == "failed" and any("vocabulary size differs" in d for d in gate["details"])
    assert [g["status"] for g in report["gates"][1:]] == ["skipped"] * 6
    assert "servers ready" not in text
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("skipped") == "6"


async def test_misaligned_pair_measures_no_speed_up_even_when_going_on(tmp_path: Path) -> None:
    code, report, _ = await _accept(tmp_path, "labs/faults/misaligned_tokenizer.toml", keep_going=True,
                                    stages=("tokenizer_alignment", "latency_curve", "stress"))
    assert code == ExitCode.TOKENIZER_ALIGNMENT
    assert all("misaligned" in _gate(report, s)["summary"] for s in ("latency_curve", "stress"))


async def test_lossy_verifier_breaks_greedy_equivalence(tmp_path: Path) -> None:
    code, report, text = await _accept(tmp_path, "labs/faults/lossy_verifier.toml", stages=("equivalence",),
                                       overrides={"equivalence": {"mode": "greedy"}})
    assert code == ExitCode.EQUIVALENCE, text
    gate = _gate(report, "equivalence")
    assert any(d.startswith("FAIL greedy k4") and "first difference at token" in d for d in gate["details"])


async def test_sampling_drift_fails_the_distribution_test(tmp_path: Path) -> None:
    # The bundled lab drifts temperature by x0.6 on the speculative path: decisive at 400 samples
    # (x0.1 was measured invisible on the simulator's peaked models even at 5000 samples).
    code, report, text = await _accept(tmp_path, "labs/faults/sampling_drift.toml", stages=("equivalence",),
                                       overrides={"equivalence": {"mode": "distribution"}})
    assert code == ExitCode.EQUIVALENCE, text
    gate = _gate(report, "equivalence")
    assert any("output distributions differ" in d for d in gate["details"]), gate["details"]
    assert gate["metrics"]["p_values"]["k4"]


async def test_json_corruption_fails_structured_output_and_falls_back(tmp_path: Path) -> None:
    code, report, text = await _accept(tmp_path, "labs/faults/json_corruption.toml", stages=("structured",))
    assert code == ExitCode.STRUCTURED_OUTPUT, text
    gate = _gate(report, "structured")
    rates = gate["metrics"]["failure_rate_pct"]
    assert rates["baseline"]["tool_call"] == 0.0 and rates["k4"]["tool_call"] > 1.0
    fallbacks = gate["metrics"]["fallbacks"]["k4"]
    assert fallbacks["fell_back"] > 0 and fallbacks["fallback_ok"] == fallbacks["fell_back"]
    assert set(gate["metrics"]["failure_reasons"]["k4"]["tool_call"]) == {"invalid"}
    assert gate["metrics"]["examples"]["k4"]["tool_call"]
    assert {"variant": "k4", "class": "tool_call", "route_to": "baseline"}.items() <= \
        gate["metrics"]["fallback_routes"][0].items()


async def test_runaway_fails_structured_output_by_length_with_http_200(tmp_path: Path) -> None:
    code, report, text = await _accept(tmp_path, "labs/faults/runaway.toml", stages=("structured",))
    assert code == ExitCode.STRUCTURED_OUTPUT, text
    gate = _gate(report, "structured")
    assert gate["metrics"]["failure_rate_pct"]["baseline"]["tool_call"] == 0.0
    reasons = gate["metrics"]["failure_reasons"]["k4"]["tool_call"]
    assert list(reasons) == ["cut at max_tokens where the baseline finished"] and reasons[next(iter(reasons))] > 0
    fallbacks = gate["metrics"]["fallbacks"]["k4"]
    assert fallbacks["fell_back"] > 0 and fallbacks["fallback_ok"] == fallbacks["fell_back"]
    assert all("trailing whitespace" in e for e in gate["metrics"]["examples"]["k4"]["tool_call"])
    assert any(d.startswith("fallback: route tool_call from k4") for d in gate["details"])


async def test_the_markdown_report_shows_structured_failure_examples_and_the_fallback(tmp_path: Path) -> None:
    code, _, text = await _accept(tmp_path, "labs/faults/json_corruption.toml", stages=("structured",))
    assert code == ExitCode.STRUCTURED_OUTPUT, text
    markdown = (tmp_path / "report.md").read_text()
    assert "    - k4 tool_call failures:" in markdown and "      - structured-tool_call-0-k4: invalid: '" in markdown
    assert "  - fallback: route tool_call from k4 to the baseline 'baseline'" in markdown


async def test_a_stage_that_cannot_go_on_keeps_the_stages_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(ctx: Any) -> Any:
        raise InputError("gateway: the controller refused the change (a test's)")

    monkeypatch.setitem(accept_stages.RUNNERS, "golden", accept_stages.StageRunner(refuse))
    code, report, text = await _accept(tmp_path, "labs/default.toml", stages=("tokenizer_alignment", "golden"))
    assert code == ExitCode.BAD_INPUT, text
    assert "error: gateway: the controller refused the change (a test's)" in text
    assert _gate(report, "tokenizer_alignment")["status"] == "passed"  # measured before the failure: kept
    assert _gate(report, "golden")["status"] == "skipped" and report["exit"]["code"] == int(ExitCode.BAD_INPUT)
    assert (tmp_path / "junit.xml").exists()
