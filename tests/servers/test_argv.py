from __future__ import annotations

import json
import shlex

import pytest

from speclab.model.lab import load_lab
from speclab.model.vllm_flags import EMITTED, REMOVED
from speclab.servers.argv import build_argv, redact_argv, render_show_lines, server_env, shell_line

from .labdata import DRAFTS, bundled_labs, flag_variety_labs, make_lab, method_lab

COMMON_TAIL = ["--enable-per-request-metrics", "--per-request-spec-decode-metrics", "detailed",
               "--enable-force-include-usage"]


def head(model: str, name: str, port: int) -> list[str]:
    return ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
            "--tensor-parallel-size", "1", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048"]


def test_baseline_vllm_argv_by_hand() -> None:
    lab = make_lab()
    argv = build_argv(lab, "baseline", engine="vllm", port=9001)
    assert argv == ["vllm", "serve", "org/target-8b", "--revision", "r1",
                    *head("org/target-8b", "org/target-8b", 9001), *COMMON_TAIL]


EXPECTED_SPEC = {
    "draft_model": {"method": "draft_model", "model": "org/draft-1b", "num_speculative_tokens": 3, "revision": "d1"},
    "eagle": {"method": "eagle", "model": "org/eagle-head", "num_speculative_tokens": 3, "revision": "e1"},
    "eagle3": {"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 3, "revision": "e3"},
    "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    "mtp": {"method": "mtp", "num_speculative_tokens": 3},
    "suffix": {"method": "suffix", "num_speculative_tokens": 3},
}
EXPECTED_SIM_SPEC = {
    "draft_model": '{"method":"draft_model","model":"sim-1b","num_speculative_tokens":3}',
    "eagle": '{"method":"eagle","model":"org/eagle-head","num_speculative_tokens":3}',
    "eagle3": '{"method":"eagle3","model":"org/eagle3-head","num_speculative_tokens":3}',
    "ngram": '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}',
    "mtp": '{"method":"mtp","num_speculative_tokens":3}',
    "suffix": '{"method":"suffix","num_speculative_tokens":3}',
}


@pytest.mark.parametrize("method", sorted(DRAFTS))
def test_speculative_vllm_argv_by_hand(method: str) -> None:
    lab = method_lab(method)
    argv = build_argv(lab, "k3", engine="vllm", port=9002)
    spec = json.dumps(EXPECTED_SPEC[method], separators=(",", ":"))
    assert argv == ["vllm", "serve", "org/target-8b", "--revision", "r1", *head("", "org/target-8b", 9002),
                    "--speculative-config", spec, *COMMON_TAIL]


@pytest.mark.parametrize("method", sorted(DRAFTS))
def test_simulator_argv_same_flags_with_stand_ins(method: str) -> None:
    lab = method_lab(method)
    argv = build_argv(lab, "k3", engine="sim", port=9003, python="/py")
    assert argv == ["/py", "-m", "speclab.sim", "sim-8b", *head("", "sim-8b", 9003),
                    "--speculative-config", EXPECTED_SIM_SPEC[method], *COMMON_TAIL, "--sim-gpu", "H100"]


def test_optional_flags_and_overrides() -> None:
    data_lab = make_lab(
        server={"max_num_seqs": 8, "enable_chunked_prefill": True, "async_scheduling": True, "scheduling_policy": "priority",
                "stream_interval": 2, "max_model_len": 1024, "extra_args": ["--enable-prefix-caching"]},
        variants=[
            {"name": "baseline", "speculative": False},
            {"name": "k2", "num_speculative_tokens": 2, "max_num_seqs": 4, "enable_chunked_prefill": False,
             "async_scheduling": False, "extra_args": ["--kv-cache-dtype", "fp8"], "sim_faults": ["stall=0.1"]},
        ],
    )
    base = build_argv(data_lab, "baseline", engine="vllm", port=1)
    assert "--enable-chunked-prefill" in base and "--async-scheduling" in base
    assert base[base.index("--max-num-seqs") + 1] == "8"
    assert base[base.index("--scheduling-policy") + 1] == "priority"
    assert base[base.index("--stream-interval") + 1] == "2"
    assert base[-1] == "--enable-prefix-caching"
    k2 = build_argv(data_lab, "k2", engine="sim", port=2, python="py")
    assert "--no-enable-chunked-prefill" in k2 and "--no-async-scheduling" in k2
    assert k2[k2.index("--max-num-seqs") + 1] == "4"
    assert k2[-7:] == ["--enable-prefix-caching", "--kv-cache-dtype", "fp8", "--sim-gpu", "H100", "--sim-fault", "stall=0.1"]
    # unset switches are left to vLLM's defaults
    plain = build_argv(make_lab(), "k3", engine="vllm", port=3)
    for flag in ("--async-scheduling", "--no-async-scheduling", "--enable-chunked-prefill", "--gpu-memory-utilization"):
        assert flag not in plain


def test_shared_topology_splits_gpu_memory() -> None:
    lab = make_lab(server={"topology": "shared", "gpu_memory_utilization": 0.9, "gpus": [3]})
    for name in ("baseline", "k3"):
        argv = build_argv(lab, name, engine="vllm", port=1)
        assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.45"
        assert server_env(lab, name, engine="vllm")["CUDA_VISIBLE_DEVICES"] == "3"


def test_separate_topology_assigns_gpus_per_server() -> None:
    lab = make_lab(server={"tensor_parallel_size": 2, "gpus": [4, 5, 6, 7]})
    assert server_env(lab, "baseline", engine="vllm")["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert server_env(lab, "k3", engine="vllm")["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert "CUDA_VISIBLE_DEVICES" not in server_env(lab, "k3", engine="sim")


def test_every_emitted_flag_is_in_the_table_and_none_removed() -> None:
    for lab in [*bundled_labs(), *flag_variety_labs()]:
        for name in lab.variant_names:
            for engine in ("vllm", "sim"):
                argv = build_argv(lab, name, engine=engine, port=8000)  # type: ignore[arg-type]
                extra = set(lab.effective(name).extra_args)
                flags = [a for a in argv if a.startswith("--") and a not in extra and not a.startswith("--sim-")]
                assert all(f in EMITTED for f in flags), (lab.name, name, flags)
                assert not REMOVED & set(argv)
                assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_api_key_goes_by_env_and_is_redacted() -> None:
    lab = make_lab(server={"api_key_env": "MY_KEY", "env": {"HF_TOKEN": "hf_secret", "FOO": "bar"},
                           "extra_args": ["--api-key", "sk-live"]})
    argv = build_argv(lab, "baseline", engine="vllm", port=1)
    env = server_env(lab, "baseline", engine="vllm", api_key="sk-from-env")
    assert env["VLLM_API_KEY"] == "sk-from-env" and "sk-from-env" not in argv
    line = shell_line(argv, env)
    assert "sk-live" not in line and "sk-from-env" not in line and "hf_secret" not in line
    assert "FOO=bar" in line and "--api-key '***'" in line
    assert redact_argv(["--api-key=abc", "x"]) == ["--api-key=***", "x"]
    shown = render_show_lines(lab, engine_available="sim: no GPU")
    assert all("sk-live" not in s and "hf_secret" not in s for s in shown)
    assert shown[1].startswith('VLLM_API_KEY="$MY_KEY" ')


def test_show_lines_for_default_lab() -> None:
    lab = load_lab("default")
    lines = render_show_lines(lab, engine_available="sim: no `vllm` executable on PATH", python="python")
    commands = [ln for ln in lines if not ln.startswith("#")]
    assert len(commands) == 2 * len(lab.variants)
    vllm_lines, sim_lines = commands[: len(lab.variants)], commands[len(lab.variants) :]
    assert all(" vllm serve meta-llama/Llama-3.1-8B-Instruct " in ln for ln in vllm_lines)
    assert all(ln.startswith("python -m speclab.sim sim-8b ") for ln in sim_lines)
    assert lines[len(lab.variants) + 1] == "# this machine runs the simulator (no `vllm` executable on PATH):"
    # each line is valid shell that round-trips to the argv
    argv = shlex.split(vllm_lines[2])
    assert argv[0] == "CUDA_VISIBLE_DEVICES=2" and argv[1:4] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4,
                    "revision": "main"}
    on_gpu = render_show_lines(lab, engine_available="vllm")
    assert on_gpu[-1] == "# this machine runs the vLLM lines above"
    assert len(on_gpu) == len(lab.variants) + 2


def test_lab_show_warns_on_lossy_rejection_methods() -> None:
    from .labdata import spec_variety_labs

    knobs = spec_variety_labs()[0]
    lines = render_show_lines(knobs, engine_available="sim: no GPU")
    warnings = [line for line in lines if line.startswith("# WARNING")]
    assert [w.split(":")[0] for w in warnings] == ["# WARNING synth", "# WARNING synthr", "# WARNING fly"]
    assert all("lossy" in w and "the equivalence gate fails it" in w for w in warnings)
    assert not [line for line in render_show_lines(make_lab(), engine_available="sim") if "WARNING" in line]
