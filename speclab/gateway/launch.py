"""Start a lab's servers and an HAProxy in front of them, and stop both on every path.

HAProxy runs in the foreground (``-db``) under speclab's reaper, exactly as the servers do
(``speclab.servers.process``), so it dies with speclab even after a SIGKILL. It is bound to
127.0.0.1 on a free port, and is ready when its stats socket answers as HAProxy. The gateway
package uses the servers package (the manager and the reaper); the servers never use the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speclab.model.errors import InputError, ServerNotReadyError
from speclab.model.lab import Lab
from speclab.servers.argv import SIM_MODULE, Engine
from speclab.servers.manager import RunningServer, ServerManager
from speclab.servers.process import ServerProcess, free_port

from .config import SOCKET_DIR_PREFIX, GatewayFiles, check_config, haproxy_version
from .controller import EventSink, GatewayController
from .files import write_production_files
from .routing import RoutingTable
from .runtime import RuntimeAPI
from .state import GatewayState

HOST = "127.0.0.1"
READY_TIMEOUT_S = 20.0


@dataclass
class RunningGateway:
    state: GatewayState
    files: GatewayFiles
    manager: ServerManager | None = None
    process: ServerProcess | None = None
    servers: dict[str, RunningServer] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.state.url

    @property
    def haproxy_exited(self) -> int | None:
        return self.process.returncode if self.process else None

    async def controller(self, *, clock: Callable[[], float] | None = None,
                         sinks: list[EventSink] | None = None, write_files: bool = True) -> GatewayController:
        return await GatewayController.open(report_dir=self.files.directory, clock=clock, sinks=sinks,
                                            write_files=write_files)

    async def stop(self) -> None:
        """HAProxy first (no new requests reach a stopping server), then the servers."""
        if self.process is not None:
            with contextlib.suppress(Exception):
                await self.process.stop()
        if self.manager is not None:
            with contextlib.suppress(Exception):
                await self.manager.stop()
        if self.files.socket.parent.name.startswith(SOCKET_DIR_PREFIX):  # a short path made for a long directory
            shutil.rmtree(self.files.socket.parent, ignore_errors=True)

    async def __aenter__(self) -> RunningGateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def start_gateway(
    lab: Lab,
    routing: RoutingTable,
    *,
    engine: Engine,
    directory: Path,
    haproxy: str,
    port: int | None = None,
    api_key: str | None = None,
    ready_timeout: float | None = None,
    sim_module: str | None = None,
    time_scale: float = 1.0,
) -> RunningGateway:
    """Servers for ``routing.variants``, then HAProxy; on any failure, everything started is stopped.
    ``time_scale``: the simulators' S (real servers refuse one other than 1)."""
    files = GatewayFiles.in_directory(directory)
    await _refuse_running(files)
    files.directory.mkdir(parents=True, exist_ok=True)
    manager = ServerManager(lab, engine, log_dir=files.log_dir, api_key=api_key, ready_timeout=ready_timeout,
                            sim_module=sim_module or SIM_MODULE, time_scale=time_scale)
    gw = RunningGateway(state=GatewayState(lab="", url="", socket="", config="", tenants_map="", routes_map="",
                                           servers={}, routing={}), files=files, manager=manager)
    try:
        gw.servers = await manager.start(routing.variants)
        await _start_haproxy(gw, lab, routing, haproxy, port, engine)
    except BaseException:
        await gw.stop()
        raise
    return gw


async def gateway_for(lab: Lab, routing: RoutingTable, servers: dict[str, RunningServer], *, directory: Path,
                      haproxy: str, port: int | None = None) -> RunningGateway:
    """HAProxy in front of servers someone else started (and will stop): ``stop()`` stops HAProxy only."""
    files = GatewayFiles.in_directory(directory)
    await _refuse_running(files)
    files.directory.mkdir(parents=True, exist_ok=True)
    gw = RunningGateway(state=GatewayState(lab="", url="", socket="", config="", tenants_map="", routes_map="",
                                           servers={}, routing={}), files=files,
                        servers={v: servers[v] for v in routing.variants})
    engines = {s.engine for s in gw.servers.values()}
    try:
        await _start_haproxy(gw, lab, routing, haproxy, port, engines.pop() if len(engines) == 1 else "mixed")
    except BaseException:
        await gw.stop()
        raise
    return gw


async def _start_haproxy(gw: RunningGateway, lab: Lab, routing: RoutingTable, haproxy: str, port: int | None,
                         engine: str) -> None:
    files = gw.files
    files.events.write_text("", encoding="utf-8")
    bind_port = port or free_port(HOST)
    major, minor = haproxy_version(haproxy)
    gw.state = GatewayState(
        lab=lab.name, url=f"http://{HOST}:{bind_port}", socket=str(files.socket), config=str(files.config),
        tenants_map=str(files.tenants_map), routes_map=str(files.routes_map),
        servers={v: gw.servers[v].base_url for v in routing.variants}, routing=routing.to_dict(),
        haproxy=haproxy, haproxy_version=f"{major}.{minor}", extra={"engine": engine},
    )
    write_production_files(gw.state, routing)
    check_config(haproxy, files.config)
    gw.process = ServerProcess("haproxy", [haproxy, "-db", "-f", str(files.config)], env={},
                               log_path=files.log_dir / "haproxy.log", base_url=gw.state.url, grace_s=5.0)
    await gw.process.start()
    info = await _wait_ready(gw.process, files.socket, READY_TIMEOUT_S)
    gw.state.haproxy_pid = int(info.get("Pid") or 0) or gw.process.server_pid
    gw.state.haproxy_version = info.get("Version", gw.state.haproxy_version)
    gw.state.started_monotonic = time.monotonic()
    gw.state.started_wall = time.time()
    gw.state.write(files.state)


async def _refuse_running(files: GatewayFiles) -> None:
    if not files.socket.exists():
        return
    try:
        async with RuntimeAPI(files.socket, timeout=2.0):
            pass
    except InputError:
        return  # a stale socket of a gateway that has stopped
    raise InputError(f"gateway: a gateway is already running with {files.directory} (socket {files.socket}); "
                     "stop it or use another --report directory")


async def _wait_ready(process: ServerProcess, socket: Path, timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        if process.returncode is not None:
            await process.stop()
            lines = [ln.strip() for ln in process.tail if ln.strip()]
            cause = next((ln for ln in lines if "ALERT" in ln), lines[-1] if lines else "no output")
            raise ServerNotReadyError(f"gateway: haproxy exited with status {process.returncode}: {cause}")
        if socket.exists():
            with contextlib.suppress(InputError):
                async with RuntimeAPI(socket, timeout=2.0) as api:
                    return await api.info()
        if time.monotonic() > deadline:
            await process.stop()
            raise ServerNotReadyError(f"gateway: haproxy's stats socket {socket} did not answer within {timeout:g} s")
        await asyncio.sleep(0.05)
