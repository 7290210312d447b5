"""A draft_model pair whose real vocab sizes differ is refused before launch, as vLLM 0.33 would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from speclab.cli.main import cli
from speclab.model.errors import InputError
from speclab.model.lab import Lab, load_lab
from speclab.model.paths import bundled_dir
from speclab.servers.argv import build_argv
from speclab.servers.pairing import SIM_MODELS_DIR, require_pairing, stand_in_vocab_size, vocab_problem
from speclab.sim.shapes import MODEL_SHAPES

from .labdata import lab_dict


def _qwen_lab(heterogeneous: bool) -> Lab:
    draft = {"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "d1", "sim_model": "sim-0.5b",
             "use_heterogeneous_vocab": heterogeneous}
    pair = {"target_model": "Qwen/Qwen2.5-72B-Instruct", "target_revision": "r1",
            "draft_model": "Qwen/Qwen2.5-0.5B-Instruct", "draft_revision": "d1"}
    target = {"model": "Qwen/Qwen2.5-72B-Instruct", "revision": "r1", "sim_model": "sim-72b"}
    return Lab.model_validate(lab_dict(target=target, draft=draft, pair=pair))


def test_stand_ins_carry_their_real_models_vocab_sizes() -> None:
    for name, shape in MODEL_SHAPES.items():
        config = json.loads((SIM_MODELS_DIR / name / "config.json").read_text())
        assert stand_in_vocab_size(name) == shape.vocab_size
        assert config["stands_for"] == shape.stands_for and config["num_parameters"] == shape.num_parameters
        assert config["num_hidden_layers"] == shape.num_layers and config["head_dim"] == shape.head_dim
        assert config["vocab_size"] < 4000  # the simulator's own tokenizer, which the alignment gate reads
    assert (stand_in_vocab_size("sim-72b"), stand_in_vocab_size("sim-0.5b")) == (152064, 151936)


def test_mismatched_vocab_is_refused_even_when_forced() -> None:
    lab = _qwen_lab(heterogeneous=False)
    problem = vocab_problem(lab)
    assert problem is not None and "vocab_size 152064" in problem and "has 151936" in problem
    for force in (False, True):
        with pytest.raises(InputError, match=r"draft\.use_heterogeneous_vocab"):
            require_pairing(lab, force=force)
    assert vocab_problem(_qwen_lab(heterogeneous=True)) is None


def test_the_misaligned_tokenizer_fault_lab_still_reaches_the_alignment_gate() -> None:
    lab = load_lab("faults/misaligned_tokenizer")
    assert vocab_problem(lab) is None and require_pairing(lab).paired


def test_heterogeneous_vocab_reaches_both_engines_and_only_draft_model_takes_it() -> None:
    lab = load_lab("70b")
    assert vocab_problem(lab) is None and lab.target.sim_model == "sim-72b"
    for engine in ("vllm", "sim"):
        argv = build_argv(lab, "k3", engine=engine, port=8000)  # type: ignore[arg-type]
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec["use_heterogeneous_vocab"] is True
    eagle = {"method": "eagle3", "model": "org/head", "revision": "e", "use_heterogeneous_vocab": True}
    with pytest.raises(ValueError, match="use_heterogeneous_vocab: only method 'draft_model'"):
        Lab.model_validate(lab_dict(draft=eagle))


def test_validate_names_the_vocab_problem(tmp_path: Path) -> None:
    text = (bundled_dir("labs") / "70b.toml").read_text().replace("use_heterogeneous_vocab = true\n", "")
    path = tmp_path / "qwen.toml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert "draft.use_heterogeneous_vocab" in result.output and "151936" in result.output
