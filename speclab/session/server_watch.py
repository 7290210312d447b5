"""What a live run watches of its servers between scrapes: whether each still answers ``/metrics``
(an event when one stops or comes back, and a launched server marked exited), and the peak GPU
memory per device (vLLM runs on a host with NVML)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from speclab.model.records import Event, ServerSample
from speclab.model.views import ServerView
from speclab.servers.manager import RunningServer
from speclab.servers.memory import GpuMemory, gpu_memory


def server_view(server: RunningServer, log_lines: int = 40) -> ServerView:
    """What a front end or report shows of a launched (or attached) server; no secrets."""
    return ServerView(
        variant=server.variant, status=server.status, command=server.command, base_url=server.base_url,
        engine=server.engine, settings=dict(server.settings), memory=server.memory.as_dict(),
        log_tail=server.log_tail[-log_lines:] if log_lines else (), baseline=server.baseline,
    )


class ServerWatcher:
    """Turns each scrape's ``up`` into ``server_down``/``server_up`` events, once per change.
    ``servers`` is read at each change: the session's servers are launched after the watcher exists."""

    def __init__(self, servers: Callable[[], Mapping[str, RunningServer]], add_event: Callable[[Event], None]) -> None:
        self._servers = servers
        self._add_event = add_event
        self._down: set[str] = set()

    def watch(self, sample: ServerSample) -> None:
        if not sample.up and sample.variant not in self._down:
            self._down.add(sample.variant)
            server = self._servers().get(sample.variant)
            if server is not None and server.status == "ready":
                server.status = "exited"
            self._add_event(Event(t=sample.t, kind="server_down", variant=sample.variant,
                                  message=f"{sample.variant}: /metrics unreachable: {sample.error}"))
        elif sample.up and sample.variant in self._down:
            self._down.discard(sample.variant)
            self._add_event(Event(t=sample.t, kind="server_up", variant=sample.variant,
                                  message=f"{sample.variant}: answering again"))


class GpuPeak:
    """Peak GPU memory per device from NVML (only where a GPU and nvidia-ml-py exist)."""

    def __init__(self) -> None:
        self.peak: dict[int, GpuMemory] = {}

    def sample(self) -> None:
        for gpu in gpu_memory() or []:
            peak = self.peak.get(gpu.index)
            if peak is None or gpu.used_gib > peak.used_gib:
                self.peak[gpu.index] = gpu
