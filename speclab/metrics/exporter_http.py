"""The exporter's HTTP endpoint: prometheus_client's own server on one registry holding only speclab's series.

Bound when the run is set up, before any server starts, so a port in use is a one-line bad input
(exit 2) and nothing is launched for nothing.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from speclab.model.errors import InputError

from .exporter import SpeclabCollector

DEFAULT_HOST = "127.0.0.1"


@dataclass
class MetricsEndpoint:
    collector: SpeclabCollector
    host: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(port: int, host: str = DEFAULT_HOST, run: dict[str, Any] | None = None) -> MetricsEndpoint:
    """Start serving ``/metrics`` on host:port (port 0 picks a free one) in a daemon thread."""
    if not 0 <= port <= 65535:
        raise InputError(f"--metrics-port {port}: expected a TCP port, 0..65535")
    collector = SpeclabCollector(run)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InputError(f"--metrics-port {port}: {host}:{port} is already in use") from None
        raise InputError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return MetricsEndpoint(collector, host, int(server.server_port), server, thread)
