"""Process-level behaviour: flags, start-up log lines and failures, API keys, signals."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp

from speclab.sim import logs

from .conftest import ROOT, SIM_MODULE, free_port, start_sim
from .sse import get, post_json


def run_sim(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", SIM_MODULE, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_unknown_and_removed_flags_exit_2() -> None:
    for flag in ("--no-such-flag", "--speculative-model"):
        r = run_sim("sim-1b", flag, "x")
        assert r.returncode == 2
        assert "unrecognized arguments" in r.stderr and flag in r.stderr


def test_unknown_fault_exits_2() -> None:
    r = run_sim("sim-1b", "--sim-fault", "gremlins=1")
    assert r.returncode == 2 and "unknown fault 'gremlins'" in r.stderr


def test_unknown_model_exits_1() -> None:
    r = run_sim("sim-3b", "--port", str(free_port()), "--host", "127.0.0.1")
    assert r.returncode == 1
    assert "ERROR" in r.stdout and "ValueError: Unknown model 'sim-3b'" in r.stdout


def test_bad_speculative_config_exits_1() -> None:
    r = run_sim("sim-8b", "--speculative-config", '{"method": "ngram", "prompt_lookup_min": 2}')
    assert r.returncode == 1 and "num_speculative_tokens must be provided" in r.stdout
    r = run_sim("sim-8b", "-sc", '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 6, '
                '"prompt_lookup_max": 3}')
    assert r.returncode == 1 and "prompt_lookup_min=6 must be <= prompt_lookup_max=3" in r.stdout
    r = run_sim("sim-8b", "--speculative-config", "{not json")
    assert r.returncode == 2 and "--speculative-config" in r.stderr


def test_model_that_does_not_fit_fails_like_vllm() -> None:
    r = run_sim("sim-70b", "--port", str(free_port()), "--host", "127.0.0.1")
    assert r.returncode == 1
    assert "CUDA out of memory" in r.stdout and "Engine core initialization failed" in r.stdout


def test_kv_cache_too_small_is_a_value_error_like_vllm() -> None:
    r = run_sim("sim-8b", "--gpu-memory-utilization", "0.3", "--max-model-len", "64k", "--port", str(free_port()),
                "--host", "127.0.0.1")
    assert r.returncode == 1
    assert "ValueError: To serve at least one request with the models's max seq len (64000)" in r.stdout
    assert "CUDA out of memory" not in r.stdout


def test_busy_port_fails_like_vllm() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_sim("sim-1b", "--host", "127.0.0.1", "--port", str(port))
    assert r.returncode == 1 and "Address already in use" in r.stdout


async def test_startup_lines_warning_and_sigterm(tmp_path: Path) -> None:
    p = start_sim(["sim-8b", "--enable-prefix-caching", "--dtype", "bfloat16", "-tp", "1"], tmp_path, "lines")
    try:
        out = p.log()  # how fast it starts is bench/bench_engine_build.py's to measure, not a test's
        for needle in ("Model loading took", "GPU KV cache size:", "Maximum concurrency for", "SIMULATED",
                       logs.starting_line("127.0.0.1", p.port), "Application startup complete.",
                       logs.not_modelled_line("--enable-prefix-caching"), logs.not_modelled_line("--dtype")):
            assert needle in out, needle
        assert " INFO " in out and "[gpu_model_runner.py:" in out
    finally:
        assert p.stop() == 0
    assert "Shutting down" in p.log()


async def test_sigterm_with_request_in_flight(tmp_path: Path) -> None:
    p = start_sim(["sim-8b"], tmp_path, "inflight")
    try:
        async with aiohttp.ClientSession() as s, s.post(p.url + "/v1/completions",
                                                        json={"prompt": "a", "max_tokens": 1000, "stream": True,
                                                              "ignore_eos": True}) as r:
            await r.content.readline()
            p.proc.terminate()
            raw = (await r.read()).decode()
        assert await asyncio.to_thread(p.proc.wait, 60) == 0
        assert raw.rstrip().endswith("data: [DONE]")
    finally:
        p.stop()


async def test_api_key_protects_only_v1(tmp_path: Path) -> None:
    p = start_sim(["sim-1b"], tmp_path, "key", env={"VLLM_API_KEY": "sekrit"})
    try:
        status, body = await post_json(p.url + "/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert status == 401 and body == {"error": "Unauthorized"}
        status, _ = await get(p.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = await post_json(p.url + "/v1/completions", {"prompt": "a", "max_tokens": 2},
                                    headers={"Authorization": "Bearer sekrit"})
        assert status == 200
        assert (await get(p.url + "/health"))[0] == 200
        assert (await get(p.url + "/metrics"))[0] == 200
        assert "sekrit" not in p.log()
    finally:
        p.stop()
