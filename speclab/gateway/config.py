"""The HAProxy configuration of a lab's gateway, with its map files beside it.

One backend per variant, a ``canary`` backend holding every variant with weights (the canary
shares), a tenant map keyed by the tenant header and a route map keyed by path prefix or by the
request's ``model``. Tenants win over routes, path routes over model routes, and anything unmatched
takes the canary pool (all baseline until a share is set). The maps are referred to by absolute
path, so ``haproxy -c -f haproxy.cfg`` accepts the file on its own, wherever it is run from.
Everything that changes at run time (map entries, weights) is changed through the runtime API.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from speclab.model.errors import InputError, SpeclabError
from speclab.model.gateway import BACKEND_HEADER, CANARY

from .routing import RoutingTable

MIN_VERSION = (2, 4)  # prepare/commit map (atomic replacement) and json_query
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install -y haproxy; Fedora: dnf install haproxy)"
FRONTEND = "speclab"
SBIN_DIRS: tuple[str, ...] = ("/usr/local/sbin", "/usr/sbin")  # Debian installs it here, often off a user's PATH
_SUN_PATH_MAX = 107
SOCKET_DIR_PREFIX = "speclab-gw-"


@dataclass(frozen=True)
class GatewayFiles:
    """Where one gateway's files live (all absolute)."""

    directory: Path
    socket: Path

    @classmethod
    def in_directory(cls, directory: Path) -> GatewayFiles:
        directory = directory.resolve()
        socket = directory / "haproxy.sock"
        if len(str(socket)) > _SUN_PATH_MAX:  # a Unix socket path has a hard length limit
            socket = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)) / "haproxy.sock"
        return cls(directory=directory, socket=socket)

    @property
    def config(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def tenants_map(self) -> Path:
        return self.directory / "tenants.map"

    @property
    def routes_map(self) -> Path:
        return self.directory / "routes.map"

    @property
    def state(self) -> Path:
        return self.directory / "gateway.json"

    @property
    def events(self) -> Path:
        return self.directory / "events.jsonl"

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"


def ordered_routes(routes: Mapping[str, str]) -> list[tuple[str, str]]:
    """Path prefixes longest first (HAProxy's prefix match takes the first entry that matches), then models."""
    paths = sorted((k for k in routes if k.startswith("/")), key=lambda k: (-len(k), k))
    models = sorted(k for k in routes if not k.startswith("/"))
    return [(k, routes[k]) for k in (*paths, *models)]


def map_text(entries: list[tuple[str, str]]) -> str:
    return "".join(f"{key} {value}\n" for key, value in entries)


def render_config(routing: RoutingTable, servers: Mapping[str, str], *, bind: str, files: GatewayFiles,
                  lab_name: str) -> str:
    """``servers`` maps each variant to ``host:port``; ``bind`` is the frontend's ``host:port``."""
    missing = [v for v in routing.variants if v not in servers]
    if missing:
        raise SpeclabError(f"gateway: no server address for {', '.join(missing)}")
    header = routing.tenant_header
    tenants, routes = files.tenants_map, files.routes_map
    lines = [
        f"# speclab gateway for lab {lab_name}: one backend per variant, tenants and routes in map files.",
        "# Routing changes at run time go through the stats socket (set map / set weight), never a reload.",
        "global",
        f"    stats socket {files.socket} mode 600 level admin",
        "    stats timeout 2m",
        "    log stdout format raw daemon info",
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    # SSE: send each event on as it arrives; nothing here buffers or compresses a response.",
        "    option http-no-delay",
        "    # Routes by model name read the request's JSON body (requests are small).",
        "    option http-buffer-request",
        "    timeout connect 5s",
        "    timeout client 10m",
        "    timeout server 10m",
        "    timeout http-request 30s",
        "    retries 2",
        "",
        f"frontend {FRONTEND}",
        f"    bind {bind}",
        f"    capture request header {header} len 64",
        "    capture request header X-Request-Id len 96",
        f"    http-request set-var(txn.pool) req.hdr({header}),map({tenants})",
        f"    http-request set-var(txn.pool) path,map_beg({routes}) unless {{ var(txn.pool) -m found }}",
        f"    http-request set-var(txn.pool) req.body,json_query('$.model'),map({routes}) "
        "unless { var(txn.pool) -m found }",
        "    use_backend %[var(txn.pool)] if { var(txn.pool) -m found }",
        f"    default_backend {CANARY}",
    ]
    for variant in routing.variants:
        lines += ["", f"backend {variant}", f"    http-response set-header {BACKEND_HEADER} %b",
                  f"    server {variant} {servers[variant]}"]
    weights = routing.canary_weights()
    lines += ["", f"backend {CANARY}", "    balance roundrobin",
              "    # The server that answered, named after its variant.",
              f"    http-response set-header {BACKEND_HEADER} %s"]
    lines += [f"    server {v} {servers[v]} weight {weights[v]}" for v in routing.variants]
    return "\n".join(lines) + "\n"


def write_config(routing: RoutingTable, servers: Mapping[str, str], *, bind: str, files: GatewayFiles,
                 lab_name: str) -> Path:
    files.directory.mkdir(parents=True, exist_ok=True)
    files.tenants_map.write_text(map_text(sorted(routing.tenants.items())), encoding="utf-8")
    files.routes_map.write_text(map_text(ordered_routes(routing.routes)), encoding="utf-8")
    files.config.write_text(render_config(routing, servers, bind=bind, files=files, lab_name=lab_name),
                            encoding="utf-8")
    return files.config


def find_haproxy(explicit: str | None = None) -> str:
    """The haproxy executable (version 2.4 or later), or one line saying how to install it."""
    name = explicit or "haproxy"
    path = shutil.which(name) or (None if explicit else shutil.which(name, path=os.pathsep.join(SBIN_DIRS)))
    if path is None:
        where = f"{name}: no such executable" if explicit else "haproxy is not installed (not on PATH)"
        raise InputError(f"gateway: {where}; {INSTALL_HINT}")
    version = haproxy_version(path)
    if version < MIN_VERSION:
        raise InputError(f"gateway: {path} is HAProxy {'.'.join(map(str, version))}; speclab needs 2.4 or later; "
                         f"{INSTALL_HINT}")
    return path


def haproxy_version(path: str) -> tuple[int, int]:
    try:
        out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InputError(f"gateway: cannot run {path} -v: {error}") from None
    match = re.search(r"HA-?Proxy version (\d+)\.(\d+)", out)
    if not match:
        raise InputError(f"gateway: {path} does not say it is HAProxy ({out.strip()[:80]!r})")
    return int(match.group(1)), int(match.group(2))


def check_config(haproxy: str, config: Path) -> None:
    """``haproxy -c -f CONFIG``: the written file must stand on its own."""
    out = subprocess.run([haproxy, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        text = (out.stderr + out.stdout).strip().splitlines()
        first = next((ln for ln in text if "ALERT" in ln), text[0] if text else "no output")
        raise SpeclabError(f"gateway: haproxy -c rejected {config}: {first.strip()}")
