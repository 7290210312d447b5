"""The launcher against the real simulator: every bundled lab starts, serves and stops; the fake
`vllm` on PATH proves the vLLM path (argv recorded, then the simulator runs with the same flags)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import aiohttp
import pytest

from speclab.model.errors import ServerNotReadyError
from speclab.model.lab import Lab, load_lab
from speclab.servers.argv import build_argv
from speclab.servers.engine import select_engine
from speclab.servers.manager import ServerManager

from .labdata import bundled_lab_paths, make_lab, method_lab

FAKE_VLLM_DIR = Path(__file__).resolve().parent / "fake_vllm"


async def complete(base_url: str, model: str, headers: dict[str, str] | None = None) -> dict:
    body = {"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "seed": 1}
    async with aiohttp.ClientSession(headers=headers) as s, s.post(f"{base_url}/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


@pytest.mark.parametrize("path", bundled_lab_paths(), ids=lambda p: p.stem)
async def test_bundled_lab_runs_on_the_simulator(path: Path, tmp_path: Path) -> None:
    lab = load_lab(path)
    mgr = ServerManager(lab, "sim", log_dir=tmp_path, ready_timeout=60, grace_s=5)
    try:
        servers = await mgr.start()
        for name, server in servers.items():
            assert server.memory.weights_gib and server.memory.kv_cache_tokens, name
            assert server.memory.max_concurrency, name
            out = await complete(server.base_url, server.model_name or "")
            assert out["usage"]["completion_tokens"] >= 1
    finally:
        await mgr.stop()


async def test_fake_vllm_drives_the_vllm_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv_log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{FAKE_VLLM_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPECLAB_FAKE_GPU", "1")
    monkeypatch.setenv("SPECLAB_FAKE_VLLM_ARGV_LOG", str(argv_log))
    monkeypatch.setenv("SPECLAB_FAKE_VLLM_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    monkeypatch.setenv("MY_TEST_KEY", "sk-test-123")
    choice = select_engine("auto")
    assert choice.engine == "vllm" and str(FAKE_VLLM_DIR) in choice.reason
    lab: Lab = load_lab("default").model_copy(update={"server": load_lab("default").server.model_copy(update={"api_key_env": "MY_TEST_KEY"})})
    mgr = ServerManager(lab, "vllm", log_dir=tmp_path / "logs", api_key=os.environ["MY_TEST_KEY"], ready_timeout=60, grace_s=5)
    try:
        servers = await mgr.start(["baseline", "k2"])
        k2 = servers["k2"]
        assert k2.model_name == "meta-llama/Llama-3.1-8B-Instruct" and k2.engine == "vllm"
        assert k2.command.startswith("CUDA_VISIBLE_DEVICES=1 vllm serve meta-llama/Llama-3.1-8B-Instruct ")
        assert "sk-test-123" not in k2.command and "sk-test-123" not in " ".join(k2.argv)
        out = await complete(k2.base_url, k2.model_name, {"Authorization": "Bearer sk-test-123"})
        assert out["model"] == "meta-llama/Llama-3.1-8B-Instruct"
        async with aiohttp.ClientSession() as s, s.post(f"{k2.base_url}/v1/completions", json={"model": k2.model_name, "prompt": "x"}) as r:
            assert r.status == 401  # the key reached the server through VLLM_API_KEY
        recorded = [json.loads(line) for line in argv_log.read_text().splitlines()]
        by_port = {rec["argv"][rec["argv"].index("--port") + 1]: rec for rec in recorded}
        for name, server in servers.items():
            port = server.base_url.rsplit(":", 1)[1]
            expected = build_argv(lab, name, engine="vllm", port=int(port))
            assert by_port[port]["argv"] == expected[1:]
        assert {rec["cuda_visible_devices"] for rec in recorded} == {"0", "1"}
        event = await mgr.relaunch("k2", {"num_speculative_tokens": 3})
        assert event.data["changes"] == {"num_speculative_tokens": {"from": 2, "to": 3}}
        last = json.loads(argv_log.read_text().splitlines()[-1])["argv"]
        assert json.loads(last[last.index("--speculative-config") + 1])["num_speculative_tokens"] == 3
        await complete(k2.base_url, k2.model_name, {"Authorization": "Bearer sk-test-123"})
    finally:
        await mgr.stop()


@pytest.mark.parametrize(
    ("lab", "cause", "evidence"),
    [
        (make_lab(target={"model": "org/t", "sim_model": "nope-8b"}, pair=None), "model not found",
         "Unknown model 'nope-8b'"),
        (make_lab(server={"gpu_memory_utilization": 0.25, "max_model_len": 32768}), "CUDA out of memory",
         "KV cache is needed, which is larger than the available KV cache memory"),
    ],
    ids=["unknown-model", "kv-cache-too-small"],
)
async def test_simulator_start_failures_are_named(lab: Lab, cause: str, evidence: str, tmp_path: Path) -> None:
    mgr = ServerManager(lab, "sim", log_dir=tmp_path, ready_timeout=60, grace_s=5)
    with pytest.raises(ServerNotReadyError) as info:
        await mgr.start(["k3"])
    message = str(info.value)
    assert message.startswith(f"k3: server {cause} (exited with code 1): "), message
    assert evidence in message


@pytest.mark.parametrize("method", ["eagle3", "mtp", "suffix"])
async def test_heads_and_suffix_decoding_draft_on_the_simulator(method: str, tmp_path: Path) -> None:
    mgr = ServerManager(method_lab(method), "sim", log_dir=tmp_path, ready_timeout=60, grace_s=5)
    try:
        k3 = (await mgr.start(["k3"]))["k3"]
        body = {"model": k3.model_name, "prompt": "red green blue red green blue red green blue red green",
                "max_tokens": 12, "temperature": 0}
        async with aiohttp.ClientSession() as s, s.post(f"{k3.base_url}/v1/completions", json=body) as r:
            out = await r.json()
        assert out["metrics"]["speculative_decoding"]["num_spec_steps"] >= 1
        if method != "suffix":  # a head: said to be modelled on the target's own state
            assert f"speculative method '{method}'" in "\n".join(k3.log_tail)
            assert "on sim-8b's own state" in "\n".join(k3.log_tail)
    finally:
        await mgr.stop()
