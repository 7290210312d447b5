"""The production equivalents in a gateway's directory, kept equal to the live routing.

``haproxy.cfg`` with ``tenants.map`` and ``routes.map`` beside it, and ``gateway-api.yaml`` with
its rollback. Written when the gateway starts and again after every change, so the files always
describe what HAProxy is doing now (HAProxy itself never rereads them: changes go through its
runtime API), and a restart from them would come back with the same routing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from speclab.model.records import Event

from .config import GatewayFiles, write_config
from .manifests import write_manifests
from .routing import RoutingTable
from .state import GatewayState


def host_port(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port}"


def write_production_files(state: GatewayState, routing: RoutingTable) -> list[Path]:
    files = GatewayFiles(directory=Path(state.config).parent, socket=Path(state.socket))
    config = write_config(routing, {v: host_port(u) for v, u in state.servers.items()}, bind=host_port(state.url),
                          files=files, lab_name=state.lab)
    return [config, files.tenants_map, files.routes_map, *write_manifests(routing, state.lab, files.directory)]


def production_files_sink(state: GatewayState) -> Callable[[Event], None]:
    """After each change, rewrite the files from the routing the change left."""

    def write(event: Event) -> None:
        after = event.data.get("after")
        if isinstance(after, dict):
            write_production_files(state, RoutingTable.from_dict(after))

    return write
