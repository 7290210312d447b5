from __future__ import annotations

from pathlib import Path

import pytest

from speclab.model.errors import InputError
from speclab.model.lab import load_lab

from .labdata import bundled_lab_paths

GOOD = """
name = "x"
[target]
model = "org/t"
revision = "r"
sim_model = "sim-8b"
[draft]
method = "draft_model"
model = "org/d"
revision = "r"
sim_model = "sim-1b"
[server]
max_num_seqs = 8
[[variants]]
name = "baseline"
speculative = false
[[variants]]
name = "k2"
num_speculative_tokens = 2
"""


def load_text(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return load_lab(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(InputError) as info:
        load_text(tmp_path, text)
    return str(info.value)


def test_bundled_labs_load_and_are_clean() -> None:
    paths = bundled_lab_paths()
    names = {p.name for p in paths if p.parent.name == "labs"}
    assert {"default.toml", "ngram.toml", "70b.toml"} <= names
    faults = {p.stem for p in paths if p.parent.name == "faults"}
    assert faults == {"misaligned_tokenizer", "lossy_verifier", "sampling_drift", "json_corruption", "crash", "stall",
                      "http_500", "malformed_sse", "runaway"}
    for path in paths:
        lab = load_lab(path)
        assert lab.baseline == "baseline"
        faulty = [v.sim_faults for v in lab.variants if v.sim_faults]
        if path.parent.name == "faults":
            assert len(faulty) <= 1 and (faulty or (lab.draft and lab.draft.sim_model == "sim-1b-misaligned"))
        else:
            assert not faulty
    default = load_lab("default")
    assert default.target.sim_model == "sim-8b" and default.draft is not None and default.draft.sim_model == "sim-1b"
    assert default.variant_names == ("baseline", "k2", "k4")


def test_good_lab_loads(tmp_path: Path) -> None:
    lab = load_text(tmp_path, GOOD)
    assert lab.effective("k2").max_num_seqs == 8 and lab.effective("k2").num_speculative_tokens == 2


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('model = "org/d"\n', "", "lab.toml: draft.model: method 'draft_model' needs a draft model"),
        ("num_speculative_tokens = 2", "num_speculative_tokens = 0", "lab.toml: variants[1].num_speculative_tokens: expected an integer at least 1 and at most 64, got 0"),
        ('name = "k2"\nnum_speculative_tokens = 2', 'name = "k2"', "lab.toml: variants[1].num_speculative_tokens: variant 'k2' is speculative"),
        ('name = "k2"', 'name = "baseline"', "lab.toml: variants: duplicate variant name(s) baseline"),
        ("speculative = false", "num_speculative_tokens = 1", "lab.toml: variants: no baseline"),
        ("max_num_seqs = 8", "max_num_seqs = 8\nmax_num_seq = 2", "lab.toml: server.max_num_seq: unknown key; did you mean 'max_num_seqs'?"),
        ('method = "draft_model"', 'method = "medusa"', "lab.toml: draft.method: expected one of 'draft_model', 'eagle', 'eagle3', 'ngram', 'mtp', 'suffix', got 'medusa'"),
        ("max_num_seqs = 8", 'extra_args = ["--speculative-model", "x"]', "lab.toml: server.extra_args: --speculative-model was removed from vLLM"),
        ("max_num_seqs = 8", 'extra_args = ["--max-num-seqs", "4"]', "lab.toml: server.extra_args: --max-num-seqs: set max_num_seqs in the lab instead"),
        ("max_num_seqs = 8", 'extra_args = ["-sc={}"]', "lab.toml: server.extra_args: -sc: set the [draft] table and the variants' keys in the lab instead"),
        ("max_num_seqs = 8", 'extra_args = ["--disable-log-stats"]', "lab.toml: server.extra_args: --disable-log-stats: speclab reads vLLM's per-request metrics"),
        ("max_num_seqs = 8", 'extra_args = ["--spec-tokens", "3"]', "lab.toml: server.extra_args: --spec-tokens: vLLM refuses it beside the --speculative-config"),
        ("max_num_seqs = 8", 'extra_args = ["--port", "9"]', "lab.toml: server.extra_args: --port: speclab sets it"),
        ("max_num_seqs = 8", 'sim_gpu = "Z999"', "lab.toml: server.sim_gpu: expected one of 'H100', 'H200', 'A100', 'L4'"),
        ("max_num_seqs = 8", 'topology = "shared"\ngpu_memory_utilization = 0.9', None),
        ("max_num_seqs = 8", "gpus = [0]", "lab.toml: server.gpus: topology 'separate' needs 2 GPUs"),
    ],
)
def test_validation_errors_name_the_field(tmp_path: Path, old: str, new: str, expected: str | None) -> None:
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    if expected is None:
        load_text(tmp_path, text)
        return
    assert expected in error_of(tmp_path, text)


def test_shared_topology_overcommit_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("max_num_seqs = 8", 'topology = "shared"\ngpu_memory_utilization = 0.9').replace(
        "num_speculative_tokens = 2", "num_speculative_tokens = 2\ngpu_memory_utilization = 0.6"
    ).replace("speculative = false", "speculative = false\ngpu_memory_utilization = 0.5")
    message = error_of(tmp_path, text)
    assert "lab.toml: server.topology: 'shared' puts 2 servers on one GPU" in message and "1.10" in message


def test_ngram_refuses_explicit_async_scheduling(tmp_path: Path) -> None:
    text = GOOD.replace('method = "draft_model"\nmodel = "org/d"\nrevision = "r"\nsim_model = "sim-1b"', 'method = "ngram"')
    text = text.replace("max_num_seqs = 8", "async_scheduling = true")
    assert "lab.toml: variants[1].async_scheduling: vLLM 0.33 refuses async scheduling with the CPU ngram drafter" in error_of(tmp_path, text)


def test_with_changes_validates(tmp_path: Path) -> None:
    lab = load_text(tmp_path, GOOD)
    assert lab.with_changes("k2", {"num_speculative_tokens": 5}).effective("k2").num_speculative_tokens == 5
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        lab.with_changes("k2", {"num_speculative_tokens": 0})
    with pytest.raises(ValueError, match="cannot change seed"):
        lab.with_changes("k2", {"seed": 1})
