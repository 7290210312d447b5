"""`speclab sweep` refuses bad input before any server starts: exit 2 and one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from speclab.cli.main import cli
from speclab.cli.sweep import ladder
from speclab.model.exit_codes import ExitCode
from speclab.session.sweep_lab import cell_lab
from speclab.sweep import CellConfig

from .conftest import write_lab

SPEC = '[[variants]]\nname = "k2"\nnum_speculative_tokens = 2\n'
NO_DRAFT = """
name = "plain"
[target]
model = "meta-llama/Llama-3.1-8B-Instruct"
sim_model = "sim-8b"
[[variants]]
name = "baseline"
speculative = false
"""


def _sweep(args: list[str], cwd: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["sweep", *args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize(("extra", "field"), [
    (["--k", ""], "--k: the grid is empty"),
    (["--concurrency", ""], "--concurrency: the load ladder is empty"),
    (["--k", "0"], "--k: the grid has only k=0"),
    (["--k", "0,65"], "--k: k=65 is above the lab limit"),
    (["--concurrency", "0,4"], "--concurrency: 0 is not a load level"),
    (["--rate", "-1"], "--rate: -1 is not a load level"),
    (["--concurrency", "1,x"], "--concurrency: 'x' is not a number"),
    (["--slo", "ttft_p99=200ms,latency_p99=1s"], "--slo: unknown key 'latency_p99'"),
    (["--cell-duration", "0"], "--cell-duration: 0 s is not a cell length"),
    (["--repeats", "0"], "--repeats: 0 is out of range"),
    (["--chunked-prefill", "maybe"], "--chunked-prefill: 'maybe' is not on/off"),
    (["--schedule", "1-8:2,4-64:1"], "--schedule: "),
])
def test_bad_grid_exits_2_naming_the_field(tmp_path: Path, extra: list[str], field: str) -> None:
    lab = write_lab(tmp_path / "lab.toml", variant_extra=SPEC)
    code, output = _sweep([str(lab), "smoke", "--report", str(tmp_path / "out"), *extra], tmp_path)
    assert code == ExitCode.BAD_INPUT, output
    assert field in output
    assert not (tmp_path / "out").exists()


def test_a_k_without_a_draft_exits_2(tmp_path: Path) -> None:
    lab = tmp_path / "plain.toml"
    lab.write_text(NO_DRAFT)
    code, output = _sweep([str(lab), "smoke", "--k", "0,2", "--report", str(tmp_path / "out")], tmp_path)
    assert code == ExitCode.BAD_INPUT and "--k: k=2 needs a draft" in output


def test_a_k_the_labs_verification_cannot_take_exits_2(tmp_path: Path) -> None:
    lab = write_lab(tmp_path / "lab.toml", variant_extra=SPEC + 'rejection_sample_method = "fly"\n')
    code, output = _sweep([str(lab), "smoke", "--k", "0,1,2", "--report", str(tmp_path / "out")], tmp_path)
    assert code == ExitCode.BAD_INPUT, output
    assert output.strip() == ("speclab: error: --k: k=1: vLLM 0.33 refuses it with rejection_sample_method 'fly': "
                              "FLy requires num_speculative_tokens to be at least 2.")
    assert not (tmp_path / "out").exists()


def test_a_sweep_directory_is_not_overwritten_and_resume_needs_one(tmp_path: Path) -> None:
    lab = write_lab(tmp_path / "lab.toml", variant_extra=SPEC)
    code, output = _sweep([str(lab), "smoke", "--resume", "--report", str(tmp_path / "none")], tmp_path)
    assert code == ExitCode.BAD_INPUT and "no sweep to resume" in output
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "sweep.json").write_text("{}")
    code, output = _sweep([str(lab), "smoke", "--report", str(taken)], tmp_path)
    assert code == ExitCode.BAD_INPUT and "a sweep is already there" in output
    assert (taken / "sweep.json").read_text() == "{}"


def test_quick_ladder_spans_one_to_max_num_seqs() -> None:
    assert ladder(64, 3) == [1, 8, 64]
    assert ladder(256, 4) == [1, 6, 40, 256]
    assert ladder(1, 3) == [1]


def test_a_cell_lab_is_the_lab_with_one_variant_set_to_the_cell() -> None:
    from speclab.model.lab import load_lab

    lab = load_lab("default")
    k0, name0 = cell_lab(lab, CellConfig(0, max_num_seqs=128))
    assert name0 == "k0-seqs128" and k0.variant_names == ("k0-seqs128",)
    assert k0.effective(name0).speculative is False and k0.effective(name0).max_num_seqs == 128
    k6, name6 = cell_lab(lab, CellConfig(6, enable_chunked_prefill=False))
    assert k6.variant_names[0] == name6 == "k6-chunkedoff"
    eff = k6.effective(name6)
    assert eff.speculative and eff.num_speculative_tokens == 6 and eff.enable_chunked_prefill is False
    assert eff.gpus == (0,)
