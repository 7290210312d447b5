from __future__ import annotations

from pathlib import Path

import pytest

from speclab.gates.tokenizer_alignment import alignment_result, compare_tokenizers
from speclab.model.errors import InputError

from .tokenizer_dirs import SPECIALS, TEMPLATE, write_model_dir

SIM_MODELS = Path(__file__).resolve().parents[2] / "speclab" / "sim" / "data" / "models"


def test_identical_tokenizers_are_aligned(tmp_path: Path) -> None:
    target = write_model_dir(tmp_path / "target")
    draft = write_model_dir(tmp_path / "draft")
    report = compare_tokenizers(target, draft)
    assert report.aligned, report.mismatches
    result = alignment_result(report)
    assert result.passed and result.exit_code == 0


def test_different_vocabulary_is_reported(tmp_path: Path) -> None:
    report = compare_tokenizers(
        write_model_dir(tmp_path / "target", vocab_size=300),
        write_model_dir(tmp_path / "draft", vocab_size=280),
    )
    assert not report.aligned
    text = "\n".join(report.mismatches)
    assert "vocabulary size differs: target 300, draft 280" in text
    assert "tokens only in the target" in text
    assert "config.json vocab_size differs" in text
    assert "round trip:" in text
    result = alignment_result(report)
    assert not result.passed and result.exit_code == 10


def test_different_eos_is_reported(tmp_path: Path) -> None:
    specials = [*SPECIALS, "<|end|>"]
    report = compare_tokenizers(
        write_model_dir(tmp_path / "target", specials=specials),
        write_model_dir(tmp_path / "draft", specials=specials, eos="<|end|>"),
    )
    text = "\n".join(report.mismatches)
    assert "eos_token differs: target '<|eos|>', draft '<|end|>'" in text
    assert "stop token ids differ" in text
    assert "vocabulary size" not in text


def test_different_chat_template_is_reported(tmp_path: Path) -> None:
    report = compare_tokenizers(
        write_model_dir(tmp_path / "target"),
        write_model_dir(tmp_path / "draft", template=TEMPLATE.replace("<|assistant|>", "ASSISTANT:")),
    )
    assert len(report.mismatches) == 1
    assert report.mismatches[0].startswith("chat template differs from character")


def test_forced_records_but_passes(tmp_path: Path) -> None:
    report = compare_tokenizers(
        write_model_dir(tmp_path / "target"), write_model_dir(tmp_path / "draft", vocab_size=280)
    )
    result = alignment_result(report, forced=True)
    assert result.passed and result.metrics["forced"] is True
    assert any(line.startswith("forced past: vocabulary size differs") for line in result.details)


def test_missing_tokenizer_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"tokenizer\.json"):
        compare_tokenizers(tmp_path / "empty", write_model_dir(tmp_path / "draft"))
    with pytest.raises(InputError, match="not a model directory"):
        compare_tokenizers(tmp_path / "nope", tmp_path / "draft")


def test_simulator_pairs() -> None:
    assert compare_tokenizers(SIM_MODELS / "sim-8b", SIM_MODELS / "sim-1b").aligned
    misaligned = compare_tokenizers(SIM_MODELS / "sim-8b", SIM_MODELS / "sim-1b-misaligned")
    assert not misaligned.aligned
    assert any("eos" in line or "vocabulary" in line for line in misaligned.mismatches)
