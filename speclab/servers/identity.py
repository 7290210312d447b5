"""Is the server answering on a port the one speclab started?

A port that another process already holds is the classic way to measure the wrong server: the
launched server dies with "Address already in use" (in its log only) while the other one answers
``/health``, and its numbers would be reported as the variant's. Three pieces of evidence, each
used where the engine allows it:

- before launch, the port is free (a bind test, naming the process that holds it);
- after readiness, the listening socket belongs to a process of the launched tree (psutil);
- a backend whose ``readiness.serves_launch_token`` is set (the simulator) serves the launch token
  speclab gave it (``SPECLAB_LAUNCH_TOKEN``) on ``/version``; vLLM has no such field, so for vLLM
  the served model names (``/v1/models``) must include the name speclab passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from dataclasses import dataclass

import aiohttp
import psutil

from speclab.model.errors import ServerNotReadyError
from speclab.model.names import LAUNCH_TOKEN_ENV

__all__ = ["LAUNCH_TOKEN_ENV", "Expected", "mismatch", "new_token", "require_free_port", "verify"]
VERSION_TOKEN_KEY = "launch_token"


def new_token() -> str:
    return secrets.token_hex(16)


def _printable(text: str) -> str:
    """``text`` on one line: control characters (a newline in a ``python -c`` script, an escape
    sequence) shown escaped, as ``repr`` writes them, so a quoted command cannot split a message."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _owner(pid: int | None) -> str:
    if pid is None:
        return "a process speclab cannot see (another user's)"
    try:
        proc = psutil.Process(pid)
        cmd = " ".join(proc.cmdline()[:4]) or proc.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({_printable(cmd)[:80]})"


def listeners(port: int) -> list[int | None] | None:
    """Pids listening on TCP ``port`` (None where the owner is hidden); None if the table is unreadable."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    return [c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def require_free_port(label: str, host: str, port: int, where: str) -> None:
    """ServerNotReadyError (exit 3) naming the holder when ``port`` cannot be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no holder
        try:
            s.bind((host, port))
        except OSError as error:
            holders = listeners(port) or []
            who = _owner(holders[0]) if holders else f"another socket ({error.strerror or error})"
            raise ServerNotReadyError(
                f"{label}: port {port} ({where}) is already in use by {who}; free it, choose another "
                "server.base_port, or leave base_port unset so speclab picks free ports") from None


def tree_pids(root: int | None) -> set[int]:
    if root is None:
        return set()
    try:
        proc = psutil.Process(root)
        return {root, *(p.pid for p in proc.children(recursive=True))}
    except psutil.Error:
        return {root}


@dataclass(frozen=True, slots=True)
class Expected:
    """What the launched server must show: its tree, its token (simulator), its served name (vLLM)."""

    label: str
    base_url: str
    port: int
    root_pid: int | None  # the reaper; the server and its engine processes are below it
    token: str
    served_model: str
    require_token: bool  # the simulator serves the token; vLLM cannot


async def _get_json(session: aiohttp.ClientSession, url: str) -> object:
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        async with session.get(url) as resp:
            if resp.status == 200:
                return await resp.json(content_type=None)
    return None


async def mismatch(expected: Expected, headers: dict[str, str] | None = None) -> str | None:
    """Why the server on ``expected.port`` is not the one launched, or None when the evidence agrees."""
    found = listeners(expected.port)
    if found:
        ours = tree_pids(expected.root_pid)
        if not any(pid in ours for pid in found if pid is not None):
            return f"{expected.base_url} is answered by {_owner(found[0])}, not by the server speclab started"
    timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers or {}) as session:
        version = await _get_json(session, f"{expected.base_url}/version")
        token = version.get(VERSION_TOKEN_KEY) if isinstance(version, dict) else None
        if token is not None and token != expected.token:
            return f"{expected.base_url}/version carries another launch's token: a server speclab did not start"
        if token is None and expected.require_token:
            return f"{expected.base_url}/version carries no launch token: a server speclab did not start"
        if not expected.require_token:
            models = await _get_json(session, f"{expected.base_url}/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            names = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
            if expected.served_model not in names:
                return (f"{expected.base_url}/v1/models serves {', '.join(map(str, names)) or 'no model'}, "
                        f"not {expected.served_model!r}: a server speclab did not start")
    return None


async def verify(expected: Expected, headers: dict[str, str] | None = None) -> None:
    """ServerNotReadyError (exit 3) in one line when the answering server is not the launched one."""
    why = await mismatch(expected, headers)
    if why is not None:
        raise ServerNotReadyError(f"{expected.label}: {why}")
