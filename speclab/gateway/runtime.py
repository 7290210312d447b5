"""A small typed client for HAProxy's runtime API (the stats socket), as HAProxy 2.6 documents it.

One connection in interactive mode (``prompt``): each command's answer ends at the ``> `` prompt,
so several commands go over one connection in order (a rollback is one connection). A command
that changes something answers with an empty line when it worked and with HAProxy's message when
it did not; that message becomes a :class:`RuntimeAPIError`. Connecting checks that the socket
is HAProxy's (``show info`` says ``Name: HAProxy``); anything else is bad input, in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from speclab.model.errors import InputError, SpeclabError

PROMPT = b"\n> "


class RuntimeAPIError(SpeclabError):
    """HAProxy refused a command (its own words are the message)."""


@dataclass(frozen=True)
class MapInfo:
    id: int
    file: str
    description: str
    curr_ver: int
    next_ver: int


@dataclass(frozen=True)
class StatRow:
    """One row of ``show stat``: a frontend, a backend, or one server of a backend."""

    proxy: str  # pxname
    name: str  # svname: FRONTEND, BACKEND or the server's name
    current: int  # scur: sessions (requests in progress) right now
    total: int  # stot: sessions since start

    @property
    def is_server(self) -> bool:
        return self.name not in ("FRONTEND", "BACKEND")


@dataclass(frozen=True)
class ServerState:
    backend: str
    server: str
    address: str
    port: int
    weight: int  # the current (user) weight
    initial_weight: int
    operational: int  # srv_op_state: 0 stopped, 1 starting, 2 running, 3 stopping


class RuntimeAPI:
    """``async with RuntimeAPI(path) as api: await api.info()``."""

    def __init__(self, socket_path: str | Path, *, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> RuntimeAPI:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        path = self.socket_path
        shown = str(path)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise InputError(f"gateway: {shown}: no such socket (is the gateway running?)") from None
        except OSError as error:
            raise InputError(f"gateway: {shown}: {error.strerror}") from None
        if not stat.S_ISSOCK(mode):
            raise InputError(f"gateway: {shown} is not a socket, so not HAProxy's stats socket")
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path)), self.timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise InputError(f"gateway: cannot connect to {shown}: {getattr(error, 'strerror', None) or error}"
                             ) from None
        try:
            await self._send_and_read("prompt")
            info = await self.info()
        except (RuntimeAPIError, asyncio.TimeoutError, OSError, asyncio.IncompleteReadError):
            await self.close()
            raise InputError(f"gateway: {shown} is not HAProxy's stats socket (no HAProxy prompt)") from None
        if info.get("Name") != "HAProxy":
            await self.close()
            raise InputError(f"gateway: {shown} is not HAProxy's stats socket (show info names "
                             f"{info.get('Name') or 'nothing'})")

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write(b"quit\n")
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _send_and_read(self, line: str) -> str:
        if self._reader is None or self._writer is None:
            raise RuntimeAPIError("gateway: the runtime API connection is closed")
        self._writer.write(line.encode() + b"\n")
        await self._writer.drain()
        raw = await asyncio.wait_for(self._reader.readuntil(PROMPT), self.timeout)
        return raw[: -len(PROMPT)].decode("utf-8", "replace")

    async def command(self, line: str) -> str:
        """Send one command and return HAProxy's answer (without the prompt)."""
        if "\n" in line or ";" in line:
            raise InputError(f"gateway: a runtime command is one line without ';': {line!r}")
        async with self._lock:
            try:
                return await self._send_and_read(line)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as error:
                raise RuntimeAPIError(f"gateway: {line.split()[0]}...: no answer from {self.socket_path} "
                                      f"({type(error).__name__})") from None

    async def change(self, line: str) -> None:
        """A command that answers nothing when it works."""
        answer = (await self.command(line)).strip()
        if answer:
            raise RuntimeAPIError(f"gateway: HAProxy refused '{line}': {answer.splitlines()[0]}")

    # -- reads ----------------------------------------------------------------------------------

    async def info(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in (await self.command("show info")).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                out[key.strip()] = value.strip()
        return out

    async def maps(self) -> list[MapInfo]:
        out: list[MapInfo] = []
        for line in (await self.command("show map")).splitlines():
            if line.startswith("#") or "(" not in line:
                continue
            head, _, rest = line.partition(" (")
            file, _, description = rest.partition(") ")
            versions = dict(part.split("=", 1) for part in description.split() if part.count("=") == 1)
            with contextlib.suppress(ValueError):
                out.append(MapInfo(id=int(head), file=file, description=description,
                                   curr_ver=int(versions.get("curr_ver", 0)), next_ver=int(versions.get("next_ver", 0))))
        return out

    async def map_entries(self, map_file: str | Path) -> list[tuple[str, str]]:
        """The current version's entries, in HAProxy's order (which is lookup order for prefix maps)."""
        out: list[tuple[str, str]] = []
        for line in (await self.command(f"show map {map_file}")).splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0].startswith("0x"):
                out.append((parts[1], parts[2]))
        return out

    async def backends(self) -> list[str]:
        return [ln.strip() for ln in (await self.command("show backend")).splitlines()
                if ln.strip() and not ln.startswith("#")]

    async def servers(self, backend: str) -> list[ServerState]:
        out: list[ServerState] = []
        lines = (await self.command(f"show servers state {backend}")).splitlines()
        header = next((ln[2:].split() for ln in lines if ln.startswith("# be_id")), [])
        for line in lines:
            parts = line.split()
            if not header or line.startswith("#") or len(parts) < len(header) - 2:
                continue
            row = dict(zip(header, parts, strict=False))
            out.append(ServerState(backend=row["be_name"], server=row["srv_name"], address=row["srv_addr"],
                                   port=int(row.get("srv_port", 0) or 0), weight=int(row["srv_uweight"]),
                                   initial_weight=int(row["srv_iweight"]), operational=int(row["srv_op_state"])))
        return out

    async def stats(self) -> list[StatRow]:
        """``show stat`` (CSV): current and total sessions of every proxy and server."""
        lines = (await self.command("show stat")).splitlines()
        header = next((ln.lstrip("# ").split(",") for ln in lines if ln.startswith("# pxname")), [])
        if not header:
            raise RuntimeAPIError(f"gateway: show stat answered no CSV header: {' '.join(lines)[:200]}")
        col = {name: i for i, name in enumerate(header)}
        out: list[StatRow] = []
        for line in lines:
            parts = line.split(",")
            if line.startswith("#") or len(parts) < len(header) - 1:
                continue
            out.append(StatRow(proxy=parts[col["pxname"]], name=parts[col["svname"]],
                               current=int(parts[col["scur"]] or 0), total=int(parts[col["stot"]] or 0)))
        return out

    # -- changes --------------------------------------------------------------------------------

    async def set_map(self, map_file: str | Path, key: str, value: str) -> None:
        await self.change(f"set map {map_file} {key} {value}")

    async def replace_map(self, map_file: str | Path, entries: list[tuple[str, str]]) -> int:
        """Atomically replace a map's contents (prepare, add to the new version, commit)."""
        answer = await self.command(f"prepare map {map_file}")
        marker = "New version created:"
        if marker not in answer:
            raise RuntimeAPIError(f"gateway: HAProxy refused 'prepare map {map_file}': {answer.strip()[:200]}")
        version = int(answer.split(marker, 1)[1].split()[0])
        for key, value in entries:
            await self.change(f"add map @{version} {map_file} {key} {value}")
        await self.change(f"commit map @{version} {map_file}")
        return version

    async def set_weight(self, backend: str, server: str, weight: int) -> None:
        await self.change(f"set server {backend}/{server} weight {int(weight)}")
