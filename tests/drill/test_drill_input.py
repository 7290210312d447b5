"""Bad input to `speclab drill` is one line and exit 2, before any server or HAProxy starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write_inputs


def _drill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speclab.cli.main", "drill", *args, "--engine", "sim"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("extra", "message"), [
    (("--pool", "k9"), "--pool 'k9': not a speculative variant"),
    (("--pool", "baseline"), "not a speculative variant"),
    (("--switch-at", "6", "--rollback-at", "5"), "expected --switch-at (6 s) < --rollback-at (5 s)"),
    (("--rollback-at", "50"), "< --duration (8 s)"),
    (("--trigger", "latency>3"), "no metric 'latency'"),
    (("--trigger", "rejection>140"), "from 0 to below 100"),
    (("--trigger", "p99>5%"), "p99 is a time"),
    (("--trigger", "structured"), "expected METRIC>THRESHOLD"),
    (("--trigger-intervals", "0"), "expected at least 1"),
    (("--canary-tenant", "A", "--control-tenant", "A"), "must differ"),
    (("--haproxy", "/nonexistent/haproxy"), "no such executable"),
    (("--time-scale", "0.5"), "--time-scale: must be >= 1"),
    (("--time-scale", "fast"), "--time-scale: expected a number >= 1 or 'auto'"),
    (("--duration", "0"), "--duration 0: expected a number greater than 0"),  # not the scenario's duration instead
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    lab, scenario = write_inputs(tmp_path)
    done = _drill(str(lab), str(scenario), "--duration", "8", "--report", str(tmp_path / "r"), *extra)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "r").exists()


def test_an_existing_report_is_not_overwritten_without_force(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.json").write_text("{}")
    done = _drill(str(lab), str(scenario), "--report", str(tmp_path / "r"))
    assert done.returncode == 2 and "report.json exists" in done.stderr
    assert (tmp_path / "r" / "report.json").read_text() == "{}"


def test_an_unknown_lab_is_one_line_and_exit_2() -> None:
    done = _drill("no-such-lab")
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_a_time_scale_for_a_real_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    done = subprocess.run([sys.executable, "-m", "speclab.cli.main", "drill", str(lab), str(scenario), "--duration", "8",
                           "--report", str(tmp_path / "r"), "--engine", "vllm", "--time-scale", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "a real vllm server always runs at 1" in done.stderr, done.stderr
    assert not (tmp_path / "r").exists()


def test_a_drill_report_that_cannot_be_written_after_the_run_is_an_input_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drill's own rewrite of report.md (after the shared writer) fails in one line, not a traceback."""
    from speclab.headless import drill
    from speclab.model.errors import InputError

    blocked = tmp_path / "r" / "report.md"
    blocked.mkdir(parents=True)  # a directory where the file goes: refused even to root
    monkeypatch.setattr(drill, "write_report", lambda report, directory: [directory / "report.json", blocked])
    monkeypatch.setattr(drill, "render_markdown", lambda report: "# drill\n\n## Variants\n")
    monkeypatch.setattr(drill, "drill_markdown", lambda block: ["## Drill"])
    with pytest.raises(InputError, match=r"--report .*/r: cannot write the drill report: Is a directory") as caught:
        drill.write_drill_report({"drill": {}}, tmp_path / "r")
    assert caught.value.exit_code == 2
