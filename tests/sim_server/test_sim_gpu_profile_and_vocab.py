"""--sim-gpu-profile files and vLLM 0.33's vocab-size rule for draft_model pairs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from speclab.sim.api import EngineConfig, SpecConfig
from speclab.sim.cli import SpecConfigError, parse_args
from speclab.sim.engine import build_engine
from speclab.sim.gpu_profile_file import load_gpu_profile, profile_to_mapping
from speclab.sim.hardware import GPU_PROFILES

from .conftest import ROOT, SIM_MODULE

VOCAB_WORDS = ("Target and draft model should have the same vocabulary size. Target model vocab_size=152064. "
               "Draft model vocab_size=151936. Using models with different tokenizers can cause out-of-bounds "
               "errors during speculative decoding.")


def _write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def test_a_profile_file_round_trips_and_reaches_the_engine(tmp_path: Path) -> None:
    slow = replace(GPU_PROFILES["H100"], name="H100-measured", step_overhead_s=0.004, source="measured here")
    path = _write(tmp_path, profile_to_mapping(slow, measured={"grid": []}))
    assert load_gpu_profile(path) == slow
    args = parse_args(["sim-8b", "--sim-gpu-profile", path])
    assert args.engine.gpu_profile == slow and args.engine.gpu == "H100-measured"
    assert (args.engine.max_num_seqs, args.engine.max_num_batched_tokens) == (1024, 8192)
    fast = build_engine(EngineConfig("sim-8b")).timer
    measured = build_engine(args.engine).timer
    assert measured.gpu.step_overhead_s - fast.gpu.step_overhead_s == pytest.approx(0.004 - 0.00120683946)


def _mutated(**changes: Any) -> dict[str, Any]:
    data = profile_to_mapping(GPU_PROFILES["H100"])
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(("data", "needle"), [
    (_mutated(kv_efficiency=None), "field 'kv_efficiency': missing"),
    (_mutated(layer_s="fast"), "field 'layer_s': expected a finite number"),
    (_mutated(flops_efficiency=72.0), "field 'flops_efficiency': expected a share of peak"),
    (_mutated(hbm_bandwidth=0), "field 'hbm_bandwidth': expected a number greater than 0"),
    (_mutated(draft_pass_s=-1e-3), "field 'draft_pass_s': expected a number of seconds >= 0"),
    (_mutated(warp_speed=9), "field 'warp_speed': not a GPU profile field"),
    (_mutated(schema="other/1"), "field 'schema': expected 'speclab.gpu_profile/1'"),
    (_mutated(name=""), "field 'name': expected a non-empty string"),
    ("{nope", "invalid JSON"),
    ([], "expected a JSON object"),
])
def test_a_bad_profile_file_is_exit_2_naming_the_field(tmp_path: Path, data: Any, needle: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(SystemExit) as info:
        parse_args(["sim-8b", "--sim-gpu-profile", path])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --sim-gpu-profile" in err and needle in err and path in err


def test_a_missing_profile_file_exits_2_from_the_process(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.json")
    r = subprocess.run([sys.executable, "-m", SIM_MODULE, "sim-8b", "--sim-gpu-profile", missing], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and f"{missing}: no such file" in r.stderr


def test_a_draft_model_pair_with_different_real_vocab_sizes_is_refused_like_vllm() -> None:
    with pytest.raises(SpecConfigError) as info:
        parse_args(["sim-72b", "-sc", '{"model": "sim-0.5b", "num_speculative_tokens": 3}'])
    assert VOCAB_WORDS in str(info.value)
    ok = parse_args(["sim-72b", "-sc", '{"model": "sim-0.5b", "num_speculative_tokens": 3, '
                     '"use_heterogeneous_vocab": true}'])
    assert ok.engine.speculative is not None and ok.engine.speculative.use_heterogeneous_vocab is True
    # EAGLE heads and n-gram lookup have no vocabulary of their own to compare
    parse_args(["sim-8b", "-sc", '{"method": "eagle3", "model": "sim-0.5b", "num_speculative_tokens": 3}'])
    # the misaligned draft stands for Llama-3.2-1B: same real vocab, so it reaches the tokenizer gate
    parse_args(["sim-8b", "-sc", '{"model": "sim-1b-misaligned", "num_speculative_tokens": 3}'])


@pytest.mark.parametrize(("cfg", "needle"), [
    ({"method": "ngram", "num_speculative_tokens": 3, "use_heterogeneous_vocab": True},
     "use_heterogeneous_vocab only works with method='draft_model'"),
    ({"model": "sim-0.5b", "num_speculative_tokens": 3, "use_heterogeneous_vocab": True,
      "draft_sample_method": "probabilistic"}, "only supports greedy draft sampling"),
])
def test_heterogeneous_vocab_rules(cfg: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecConfigError, match=needle):
        parse_args(["sim-72b", "-sc", json.dumps(cfg)])


def test_the_vocab_refusal_is_a_start_up_failure_of_the_process() -> None:
    r = subprocess.run([sys.executable, "-m", SIM_MODULE, "sim-8b", "--port", "0", "-sc",
                        '{"model": "sim-0.5b", "num_speculative_tokens": 2}'], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "Target model vocab_size=128256. Draft model vocab_size=151936." in r.stdout


def test_an_eagle_head_is_priced_and_sized_as_the_head() -> None:
    eagle = build_engine(EngineConfig("sim-8b", speculative=SpecConfig("eagle3", 3, "sim-1b")))
    draft = build_engine(EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 3, "sim-1b")))
    assert 0.6 < eagle.memory.draft_weights_gib < 0.9 < 2.0 < draft.memory.draft_weights_gib
    assert eagle.timer.draft is not None and draft.timer.draft is not None
    assert eagle.timer.draft.fixed_s < draft.timer.draft.fixed_s


def test_a_lab_names_exactly_the_simulator_s_gpus() -> None:
    from typing import get_args

    from speclab.model.lab import SimGpu
    from speclab.sim.hardware import GPU_PROFILES

    assert set(get_args(SimGpu)) == set(GPU_PROFILES)  # a lab's sim_gpu is checked when it loads
