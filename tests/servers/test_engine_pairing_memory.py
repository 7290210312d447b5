from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from speclab.model.errors import InputError
from speclab.model.lab import load_lab
from speclab.servers.causes import classify_failure, describe_exit
from speclab.servers.engine import select_engine
from speclab.servers.memory import KvUsage, MemoryInfo, memory_table, parse_memory
from speclab.servers.pairing import check_pairing, pair_info, require_pairing

from .labdata import BASE, make_lab, method_lab


def test_engine_auto_needs_vllm_and_gpu() -> None:
    yes = lambda name: f"/usr/bin/{name}"  # noqa: E731
    no = lambda name: None  # noqa: E731
    choice = select_engine("auto", which=yes, gpu_probe=lambda: "/dev/nvidia0")
    assert choice.engine == "vllm" and "/usr/bin/vllm" in choice.reason and not choice.simulated
    no_gpu = select_engine("auto", which=yes, gpu_probe=lambda: None)
    assert no_gpu.engine == "sim" and no_gpu.reason == "simulated: no NVIDIA GPU visible"
    neither = select_engine("auto", which=no, gpu_probe=lambda: None)
    assert neither.reason == "simulated: no `vllm` executable on PATH and no NVIDIA GPU visible"
    assert select_engine("sim", which=yes, gpu_probe=lambda: "NVML").engine == "sim"
    with pytest.raises(InputError, match=r"^--engine vllm: no NVIDIA GPU visible; use --engine sim"):
        select_engine("vllm", which=yes, gpu_probe=lambda: None)
    with pytest.raises(InputError, match="expected auto, vllm or sim"):
        select_engine("tpu")


def test_engine_on_this_machine_is_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECLAB_FAKE_GPU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert select_engine("auto").engine == "sim"


def test_bundled_labs_are_paired() -> None:
    for name in ("default", "ngram", "70b"):
        assert check_pairing(load_lab(name)).paired, name


def test_unpaired_lab_refused_unless_forced() -> None:
    lab = make_lab(pair=None)
    with pytest.raises(InputError, match=r"lab 't' has no \[pair\] binding draft org/draft-1b to target org/target-8b \(use --force"):
        require_pairing(lab)
    forced = require_pairing(lab, force=True)
    assert forced.forced and not forced.paired and forced.reason.startswith("forced: ")
    info = pair_info(lab, forced)
    assert info["forced"] is True and info["draft_model"] == "org/draft-1b" and info["target_revision"] == "r1"


def test_revision_mismatch_is_refused() -> None:
    lab = make_lab(draft={**BASE["draft"], "revision": "d2"})
    status = check_pairing(lab)
    assert not status.paired and "draft revision 'd2' differs from the paired 'd1'" in status.reason
    no_rev = make_lab(target={**BASE["target"], "revision": None})
    assert "target.revision is not set" in check_pairing(no_rev).reason


def test_tokenizer_hashes_bind_the_pair(tmp_path: Path) -> None:
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    digest = hashlib.sha256((tok / "tokenizer.json").read_bytes()).hexdigest()
    pair = {**BASE["pair"], "draft_tokenizer_sha256": digest}
    lab = make_lab(draft={**BASE["draft"], "tokenizer": str(tok)}, pair=pair)
    assert check_pairing(lab).paired
    assert pair_info(lab)["draft_tokenizer_sha256"] == digest
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"b": 0}}}))
    assert "draft tokenizer sha256" in check_pairing(lab).reason


def test_methods_without_a_draft_checkpoint_need_no_pair() -> None:
    for method in ("ngram", "mtp", "suffix"):
        assert check_pairing(method_lab(method)).paired


LOG = [
    "(EngineCore_DP0 pid=1) INFO 05-07 10:00:00 [gpu_model_runner.py:2653] Model loading took 16.97 GiB memory and 12.500000 seconds",
    "(EngineCore_DP0 pid=1) INFO 05-07 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 452,736 tokens",
    "(EngineCore_DP0 pid=1) INFO 05-07 10:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 110.53x",
]


def test_memory_from_startup_log_and_table() -> None:
    m = parse_memory(LOG)
    assert (m.weights_gib, m.kv_cache_tokens, m.max_concurrency, m.max_concurrency_len) == (16.97, 452736, 110.53, 4096)

    class S:
        def __init__(self, variant: str, memory: MemoryInfo, baseline: bool) -> None:
            self.variant, self.memory, self.baseline = variant, memory, baseline

    spec = MemoryInfo(weights_gib=19.27, kv_cache_tokens=339552, max_concurrency=82.9, max_concurrency_len=4096)
    rows = memory_table({"baseline": S("baseline", m, True), "k4": S("k4", spec, False)},
                        {"baseline": KvUsage(2, 0.1 + 0.3, 0.3), "k4": KvUsage(2, 0.2 + 0.6, 0.6)})
    assert rows[0]["kv_usage_mean"] == pytest.approx(0.2) and rows[1]["kv_usage_peak"] == 0.6
    assert rows[1]["weights_gib_vs_baseline"] == 2.3
    assert rows[1]["kv_cache_tokens_vs_baseline"] == 0.75
    assert rows[0]["kv_cache_tokens_vs_baseline"] == 1.0
    assert memory_table([S("k4", MemoryInfo(), False)])[0]["weights_gib"] is None


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("(EngineCore_DP0 pid=9) ERROR 05-07 10:00:00 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory"),
        ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", "CUDA out of memory"),
        ("vllm serve: error: unrecognized arguments: --speculative-model x", "unknown argument"),
        ("vllm serve: error: argument --max-num-seqs: invalid int value: 'x'", "invalid argument value"),
        ("vllm serve: error: argument --speculative-config/-sc: invalid loads value: '{'", "invalid argument value"),
        ("OSError: [Errno 98] Address already in use: ('127.0.0.1', 8000)", "port in use"),
        ("ValueError: Unknown model 'sim-9b'", "model not found"),
        ("OSError: foo/bar is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'", "model not found"),
    ],
)
def test_failure_causes(line: str, cause: str) -> None:
    found = classify_failure(["INFO starting", line, "Traceback (most recent call last):"])
    assert found is not None and found[0] == cause
    text = describe_exit(1, ["x", line])
    assert text.startswith(f"{cause} (exited with code 1): ") and "[core.py" not in text


def test_unknown_failure_shows_last_line() -> None:
    assert describe_exit(-9, ["starting", "loading", ""]) == "killed by signal 9; last log line: loading"
