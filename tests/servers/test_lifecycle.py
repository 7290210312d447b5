"""Server lifecycle over real processes and sockets: start, health, relaunch, crash causes, stop.

Uses tests/servers/standin_sim.py (same flags, log lines and endpoints as the simulator, plus
engine subprocesses like vLLM's) so the tests prove the launcher, not the simulator's models.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from speclab.model.errors import InputError, ServerNotReadyError
from speclab.model.exit_codes import ExitCode
from speclab.servers.manager import ServerManager, attach, parse_attach, probe_attached

from .labdata import make_lab

STANDIN = "tests.servers.standin_sim"
ROOT = Path(__file__).resolve().parents[2]


def manager(lab, tmp_path: Path, **kw) -> ServerManager:  # type: ignore[no-untyped-def]
    kw.setdefault("ready_timeout", 90.0)
    kw.setdefault("grace_s", 3.0)
    return ServerManager(lab, "sim", log_dir=tmp_path / "logs", sim_module=STANDIN, **kw)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def get_json(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
        return await r.json()


async def test_start_health_relaunch_and_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids_file = tmp_path / "pids.json"
    monkeypatch.setenv("STANDIN_PIDS", str(pids_file))
    lab = make_lab()
    mgr = manager(lab, tmp_path, clock=lambda: 42.0)
    servers = await mgr.start()
    assert set(servers) == {"baseline", "k3"}
    base, k3 = servers["baseline"], servers["k3"]
    assert base.baseline and not k3.baseline and base.status == "ready"
    assert base.model_name == "sim-8b" and base.pid is not None and alive(base.pid)
    assert k3.memory.weights_gib == 17.3 and k3.memory.kv_cache_tokens == 350000 and k3.memory.max_concurrency == 85.45
    assert any("Starting vLLM API server" in ln for ln in k3.log_tail)
    assert (tmp_path / "logs" / "k3.log").read_text().count("GPU KV cache size") == 1
    assert (await get_json(f"{base.base_url}/v1/models"))["data"][0]["id"] == "sim-8b"

    # Relaunch k3 with k=5 while the baseline keeps answering.
    stop_polling = asyncio.Event()
    statuses: list[int] = []

    async def poll_baseline() -> None:
        async with aiohttp.ClientSession() as s:
            while not stop_polling.is_set():
                async with s.get(f"{base.base_url}/health") as r:
                    statuses.append(r.status)
                await asyncio.sleep(0.05)

    poller = asyncio.create_task(poll_baseline())
    old_pid = k3.pid
    event = await mgr.relaunch("k3", {"num_speculative_tokens": 5, "max_num_seqs": 4})
    stop_polling.set()
    await poller
    assert len(statuses) >= 3 and set(statuses) == {200}
    assert event.kind == "relaunch" and event.variant == "k3" and event.t == 42.0
    assert event.data["changes"] == {"num_speculative_tokens": {"from": 3, "to": 5}, "max_num_seqs": {"from": 8, "to": 4}}
    assert "num_speculative_tokens 3->5" in event.message
    new = mgr.servers["k3"]
    assert new.base_url == k3.base_url and new.pid != old_pid and old_pid is not None and not alive(old_pid)
    settings = await get_json(f"{new.base_url}/standin/settings")
    assert json.loads(settings["speculative_config"])["num_speculative_tokens"] == 5
    assert mgr.servers["baseline"].pid == base.pid and mgr.lab.effective("k3").num_speculative_tokens == 5

    with pytest.raises(InputError, match="cannot change max_model_len"):
        await mgr.relaunch("k3", {"max_model_len": 10})

    engine_pids = json.loads(pids_file.read_text())
    await mgr.stop()
    assert {s.status for s in mgr.servers.values()} == {"stopped"}
    for pid in [base.pid, new.pid, *engine_pids]:
        assert not alive(pid)


@pytest.mark.parametrize(
    ("change", "cause", "evidence"),
    [
        ({"server": {"extra_args": ["--no-such-flag"]}}, "unknown argument", "unrecognized arguments: --no-such-flag"),
        ({"target": {"model": "org/t", "sim_model": "nope-8b"}, "pair": None}, "model not found", "Unknown model 'nope-8b'"),
    ],
)
async def test_early_exit_names_the_cause(tmp_path: Path, change: dict, cause: str, evidence: str) -> None:
    lab = make_lab(**change)
    mgr = manager(lab, tmp_path)
    with pytest.raises(ServerNotReadyError) as info:
        await mgr.start(["baseline"])
    message = str(info.value)
    assert message.startswith(f"baseline: server {cause} (exited with code ")
    assert evidence in message and "\n" not in message
    assert info.value.exit_code == ExitCode.SERVER_NOT_READY


async def test_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        lab = make_lab(server={"base_port": port})
        mgr = manager(lab, tmp_path)
        with pytest.raises(ServerNotReadyError, match=rf"^baseline: port {port} \(server.base_port \+ 0\) is already in use by pid {os.getpid()}"):
            await mgr.start(["baseline"])


async def test_not_ready_in_time_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_DELAY", "30")
    mgr = manager(make_lab(), tmp_path, ready_timeout=1.0)
    with pytest.raises(ServerNotReadyError, match=r"^baseline: server not ready after 1 s"):
        await mgr.start(["baseline"])
    proc = mgr.servers["baseline"]._process
    assert proc is not None and proc.returncode is not None


PARENT = """
import asyncio, json, sys
from speclab.servers.manager import ServerManager
from tests.servers.labdata import make_lab

async def main():
    mgr = ServerManager(make_lab(), "sim", log_dir=sys.argv[1], sim_module="tests.servers.standin_sim", grace_s=2)
    servers = await mgr.start()
    print(json.dumps({n: s.pid for n, s in servers.items()}), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_sigkill_of_parent_leaves_no_child(tmp_path: Path) -> None:
    env = {**os.environ, "STANDIN_ESCAPE": "1", "STANDIN_PIDS": str(tmp_path / "pids.json")}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "logs")], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, "parent did not start its servers"
        descendants = psutil.Process(parent.pid).children(recursive=True)
        tree = {p.pid for p in descendants}
        assert len(tree) >= 2 * 4  # per server: reaper, server, engine in-group, engine escaped with setsid
        escaped = [p for p in descendants if os.getpgid(p.pid) == p.pid and p.name().startswith("python")]
        assert escaped
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(pid) for pid in tree):
            time.sleep(0.1)
        assert [pid for pid in tree if alive(pid)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


@pytest.mark.parametrize(("url", "why"), [
    ("http://[::1", "(Invalid IPv6 URL)"), ("http://127.0.0.1:abc", "could not be cast"),
    ("http://127.0.0.1:99999", "(Port out of range"), ("http://:80", "(no host)"),
    ("http://127.0.0.1:0", "(one server per --attach"), ("http://127.0.0.1:1,http://127.0.0.1:2", "could not be cast"),
])
def test_an_attach_url_that_names_no_server_is_bad_input_before_any_probe(url: str, why: str) -> None:
    with pytest.raises(InputError) as info:
        parse_attach(url)
    assert str(info.value).startswith(f"--attach {url!r}: expected [LABEL=]http://HOST:PORT") and why in str(info.value)
    assert info.value.exit_code == 2


async def test_attach(tmp_path: Path) -> None:
    assert parse_attach("http://127.0.0.1:8000/") == ("127.0.0.1:8000", "http://127.0.0.1:8000")
    assert parse_attach("prod=https://h:1") == ("prod", "https://h:1")
    with pytest.raises(InputError, match="expected"):
        parse_attach("prod=localhost")
    mgr = manager(make_lab(), tmp_path)
    servers = await mgr.start(["baseline"])
    try:
        server = attach("ext", servers["baseline"].base_url, {"Authorization": "Bearer x"})
        assert "Bearer" not in repr(server)
        await probe_attached(server)
        assert server.model_name == "sim-8b" and server.engine == "attached"
    finally:
        await mgr.stop()
    with pytest.raises(ServerNotReadyError, match="cannot reach"):
        await probe_attached(attach("gone", servers["baseline"].base_url), timeout=2)
