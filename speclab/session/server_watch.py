"""What a live run watches of its servers between scrapes: whether each still answers ``/metrics``
(an event when one stops or comes back, and a launched server marked exited), and the peak GPU
memory per device (vLLM runs on a host with NVML)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from speclab.model.records import Event, ServerSample
from speclab.model.views import ServerView
from speclab.servers.manager import RunningServer
from speclab.servers.memory import GpuMemory, gpu_memory
from speclab.servers.process import ServerProcess

EXIT_WAIT_S = 2.0  # a server that stopped answering has usually exited by then; its log says why


def server_view(server: RunningServer, log_lines: int = 40) -> ServerView:
    """What a front end or report shows of a launched (or attached) server; no secrets."""
    return ServerView(
        variant=server.variant, status=server.status, command=server.command, base_url=server.base_url,
        engine=server.engine, settings=dict(server.settings), memory=server.memory.as_dict(),
        log_tail=server.log_tail[-log_lines:] if log_lines else (), baseline=server.baseline,
    )


class ServerWatcher:
    """Turns each scrape's ``up`` into ``server_down``/``server_up`` events, once per change, and a
    launched server's exit into a ``server_exited`` event with its cause (from its log).
    ``servers`` is read at each change: the session's servers are launched after the watcher exists."""

    def __init__(self, servers: Callable[[], Mapping[str, RunningServer]], add_event: Callable[[Event], None]) -> None:
        self._servers = servers
        self._add_event = add_event
        self._down: set[str] = set()  # variants whose /metrics does not answer now
        self.exited: dict[str, str] = {}  # launched variants whose process exited, and why (from its log)
        self._causes: set[asyncio.Task[None]] = set()

    def watch(self, sample: ServerSample) -> None:
        variant = sample.variant
        if not sample.up and variant not in self._down:
            self._down.add(variant)
            server = self._servers().get(variant)
            if server is not None and server.status == "ready":
                server.status = "exited"
            self._add_event(Event(t=sample.t, kind="server_down", variant=variant,
                                  message=f"{variant}: /metrics unreachable: {sample.error}"))
            if server is not None and server._process is not None:
                task = asyncio.ensure_future(self._exit_cause(variant, server._process, sample.t))
                self._causes.add(task)
                task.add_done_callback(self._causes.discard)
        elif sample.up and variant in self._down:
            self._down.discard(variant)
            self.exited.pop(variant, None)
            self._add_event(Event(t=sample.t, kind="server_up", variant=variant, message=f"{variant}: answering again"))

    async def _exit_cause(self, variant: str, process: ServerProcess, t: float) -> None:
        cause = await process.exit_cause(timeout=EXIT_WAIT_S)
        if cause is not None and variant in self._down:
            self.exited[variant] = f"server exited at t={t:.1f} s: {cause}"
            self._add_event(Event(t=t, kind="server_exited", variant=variant, message=f"{variant}: {cause}"))

    async def settle(self) -> None:
        """Wait for the exit causes still being read (a few seconds at most), before a final snapshot."""
        if self._causes:
            await asyncio.gather(*self._causes, return_exceptions=True)


class GpuPeak:
    """Peak GPU memory per device from NVML (only where a GPU and nvidia-ml-py exist)."""

    def __init__(self) -> None:
        self.peak: dict[int, GpuMemory] = {}

    def sample(self) -> None:
        for gpu in gpu_memory() or []:
            peak = self.peak.get(gpu.index)
            if peak is None or gpu.used_gib > peak.used_gib:
                self.peak[gpu.index] = gpu
