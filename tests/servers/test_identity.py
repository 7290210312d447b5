"""speclab measures only the servers it started: a port held by another server is exit 3, never traffic.

The foreign server here is a real HTTP server on a real socket that answers ``/health`` 200 and
serves the same model name, the way a leftover simulator or someone's vLLM would.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from speclab.model.errors import ServerNotReadyError
from speclab.model.exit_codes import ExitCode
from speclab.servers import identity
from speclab.servers.manager import ServerManager

from .labdata import make_lab

STANDIN = "tests.servers.standin_sim"


class Foreign:
    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self.runner, self.port = runner, port


@pytest.fixture
async def foreign() -> AsyncIterator[Foreign]:
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "sim-8b", "object": "model"}]})

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.33.0", "simulated": True})

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Foreign(runner, port)
    finally:
        await runner.cleanup()


def _manager(tmp_path: Path, port: int, engine: str = "sim") -> ServerManager:
    lab = make_lab(server={"base_port": port, "max_num_seqs": 8})
    return ServerManager(lab, engine, log_dir=tmp_path / "logs", sim_module=STANDIN,  # type: ignore[arg-type]
                         ready_timeout=60.0, grace_s=3.0)


async def test_a_configured_port_held_by_another_server_is_exit_3_before_launch(tmp_path: Path,
                                                                                 foreign: Foreign) -> None:
    mgr = _manager(tmp_path, foreign.port)
    with pytest.raises(ServerNotReadyError) as caught:
        await mgr.start(["baseline"])
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.SERVER_NOT_READY
    assert message.startswith(f"baseline: port {foreign.port} (server.base_port + 0) is already in use by pid {os.getpid()}")
    assert "\n" not in message
    assert "baseline" not in mgr.servers  # nothing was launched


async def test_a_server_that_takes_the_port_after_the_check_is_found_out(tmp_path: Path, foreign: Foreign,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The race: the port was free when checked, then another server bound it before ours did.
    monkeypatch.setattr(identity, "require_free_port", lambda *a, **k: None)
    mgr = _manager(tmp_path, foreign.port)
    with pytest.raises(ServerNotReadyError) as caught:
        await mgr.start(["baseline"])
    message = str(caught.value)
    assert message.startswith(f"baseline: http://127.0.0.1:{foreign.port} is answered by pid {os.getpid()}")
    assert "not by the server speclab started" in message
    assert "the launched server port in use (exited with code 1)" in message
    assert "\n" not in message
    proc = mgr.servers["baseline"]._process
    assert proc is not None and proc.returncode is not None


async def test_the_token_tells_a_foreign_simulator_apart_even_without_the_socket_table(
        tmp_path: Path, foreign: Foreign, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "listeners", lambda port: None)  # e.g. a host where psutil sees nothing
    expected = identity.Expected(label="k3", base_url=f"http://127.0.0.1:{foreign.port}", port=foreign.port,
                                 root_pid=None, token=identity.new_token(), served_model="sim-8b",
                                 require_token=True)
    assert await identity.mismatch(expected) == (
        f"http://127.0.0.1:{foreign.port}/version carries no launch token: a server speclab did not start")
    vllm = identity.Expected(label="k3", base_url=expected.base_url, port=foreign.port, root_pid=None,
                             token=expected.token, served_model="meta-llama/Llama-3.1-8B-Instruct",
                             require_token=False)
    why = await identity.mismatch(vllm)
    assert why is not None and "serves sim-8b, not 'meta-llama/Llama-3.1-8B-Instruct'" in why


async def test_launched_servers_pass_and_get_distinct_free_ports(tmp_path: Path) -> None:
    mgr = ServerManager(make_lab(), "sim", log_dir=tmp_path / "logs", sim_module=STANDIN, ready_timeout=60.0,
                        grace_s=3.0)
    try:
        servers = await mgr.start()
        ports = {s.base_url for s in servers.values()}
        assert len(ports) == 2 and all(s.status == "ready" for s in servers.values())
        assert all(identity.LAUNCH_TOKEN_ENV not in s.command for s in servers.values())
    finally:
        await mgr.stop()
