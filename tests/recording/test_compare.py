from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from speclab.recording import Recording, compare_recordings, write_comparison
from speclab.recording.compare import compare_outputs

from . import synth
from .live_run import record_live


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recording, Recording]:
    base = tmp_path_factory.mktemp("cmp")
    record_live(base / "a")
    slower = synth.make_records(perturb={"k2": 2.0})
    for record in slower:
        index = record.prompt["index"]
        if record.variant == "k2" and index in (10, 11, 12) and record.output_token_ids:
            record.output_token_ids = [*record.output_token_ids[:3], 7, *record.output_token_ids[4:]]
    record_live(base / "b", slower)
    return Recording.open(base / "a"), Recording.open(base / "b")


def test_compare_detects_latency_and_output_differences(pair: tuple[Recording, Recording], tmp_path: Path) -> None:
    a, b = pair
    result = compare_recordings(a, b)
    k2, baseline = result["variants"]["k2"]["all"], result["variants"]["baseline"]["all"]
    decode = k2["latency_us"]["server_decode"]["p50"]
    assert decode["ratio"] == pytest.approx(2.0, rel=0.05)
    assert baseline["latency_us"]["server_decode"]["p50"]["delta"] == 0
    assert baseline["acceptance_length"]["delta"] is None  # no speculation on the baseline
    assert k2["acceptance_length"]["delta"] == 0.0
    tool = result["variants"]["k2"]["tool"]["structured_failure_rate"]
    assert k2["structured_failure_rate"]["a"] == tool["a"] > 0 and tool["delta"] == 0.0  # only tool has a schema
    out_k2, out_base = result["outputs"]["k2"], result["outputs"]["baseline"]
    assert out_base["differing"] == 0 and out_base["identical"] == out_base["matched"] > 0
    assert out_k2["differing"] == 3 and out_k2["first_differing_position_min"] == 3
    assert out_k2["identical"] == out_base["identical"] - 3
    write_comparison(result, tmp_path / "report")
    assert json.loads((tmp_path / "report" / "compare.json").read_text())["outputs"]["k2"]["differing"] == 3
    md = (tmp_path / "report" / "compare.md").read_text()
    assert "## k2" in md and "3 differing" in md and "Earliest divergence at output token 3" in md


def test_outputs_not_greedy_are_not_compared() -> None:
    a = synth.make_records(n=10)
    b = synth.make_records(n=10)
    for record in b:
        record.sampling = {"temperature": 0.8, "seed": 3}
        record.output_token_ids = [1, 2, 3]
    out = compare_outputs(a, b, "k2")
    assert out["matched"] == 0 and out["not_greedy"] > 0


@pytest.mark.parametrize("where", ["/proc/speclab-compare", "a-file/report"])  # refused even to root
def test_a_comparison_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "speclab.cli.main", "compare", "sample", "sample", "--report", where],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == ["warning: sample and sample are the same recording; every difference below is zero",
                                        f"speclab: error: --report {where}: cannot write the comparison: "
                                        + ("No such file or directory" if where.startswith("/proc") else "Not a directory")]


def test_compare_says_what_is_missing_from_a_recording_as_replay_does(tmp_path: Path) -> None:
    import shutil

    from click.testing import CliRunner

    from speclab.cli.main import cli
    from speclab.model.paths import resolve

    cut = tmp_path / "cut"
    shutil.copytree(resolve("sample", "recordings"), cut)
    (cut / "requests.jsonl").write_text("")
    result = CliRunner().invoke(cli, ["compare", "sample", str(cut), "--report", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    assert f"warning: {cut}: " in result.stderr and "record(s) are missing" in result.stderr
