"""The engine core in its own process: its death is the server's error, and it never outlives the server."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import psutil

from .conftest import SimProcess
from .conftest import start_sim as start_any_sim
from .sse import get, post_json

LONG = {"prompt": "a", "max_tokens": 2000, "stream": True, "ignore_eos": True}


def start_sim(args: list[str], tmp: Path, name: str, env: dict[str, str] | None = None) -> SimProcess:
    """The real engine's server (whatever SPECLAB_SIM_TEST_MODULE says: a test engine runs in-process)."""
    return start_any_sim(args, tmp, name, env, module="speclab.sim")


def engine_core(server_pid: int) -> psutil.Process:
    (child,) = psutil.Process(server_pid).children()
    assert "speclab.sim.engine_process" in " ".join(child.cmdline())
    return child


async def test_a_killed_engine_core_fails_the_stream_and_the_health_check(tmp_path: Path) -> None:
    p = start_sim(["sim-1b"], tmp_path, "killed")
    try:
        core = engine_core(p.proc.pid)
        async with aiohttp.ClientSession() as s, s.post(p.url + "/v1/completions", json=LONG) as r:
            await r.content.readline()  # the first chunk: the request is running in the core
            core.send_signal(signal.SIGKILL)
            events = [e.strip() for e in (await r.read()).decode().split("\n\n") if e.strip()]
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["message"] == "EngineCore encountered an issue: the engine core process died (killed by SIGKILL)"
        assert (await get(p.url + "/health"))[0] == 503
        status, body = await post_json(p.url + "/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert status == 500 and "the engine core process died (killed by SIGKILL)" in body["error"]["message"]
    finally:
        p.stop()


async def test_the_engine_core_exits_with_a_server_that_was_killed(tmp_path: Path) -> None:
    p = start_sim(["sim-1b"], tmp_path, "orphan")
    try:
        core = engine_core(p.proc.pid)
        p.proc.kill()
        await asyncio.to_thread(core.wait, 60)  # it reads end-of-file on its socket; psutil raises on timeout
    finally:
        p.stop()


async def test_sigterm_to_the_whole_tree_still_finishes_the_request_in_flight(tmp_path: Path) -> None:
    """speclab's reaper signals every process of a server's tree: the core waits for the server's word."""
    p = start_sim(["sim-1b"], tmp_path, "tree")
    try:
        core = engine_core(p.proc.pid)
        body = {**LONG, "max_tokens": 200}
        async with aiohttp.ClientSession() as s, s.post(p.url + "/v1/completions", json=body) as r:
            await r.content.readline()
            core.send_signal(signal.SIGTERM)
            p.proc.terminate()
            raw = (await r.read()).decode()
        assert await asyncio.to_thread(p.proc.wait, 60) == 0
        assert raw.rstrip().endswith("data: [DONE]") and '"error"' not in raw
        await asyncio.to_thread(core.wait, 60)
        assert "did not exit" not in p.log()  # it read end-of-file at once, not after the server's wait
    finally:
        p.stop()


async def test_vllm_multiprocessing_off_keeps_the_core_in_the_server(tmp_path: Path) -> None:
    p = start_sim(["sim-1b"], tmp_path, "inproc", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    try:
        assert psutil.Process(p.proc.pid).children() == []
        status, body = await post_json(p.url + "/v1/completions", {"prompt": "a", "max_tokens": 3})
        assert status == 200 and body["usage"]["completion_tokens"] == 3
    finally:
        p.stop()
