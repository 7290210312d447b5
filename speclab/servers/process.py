"""One server process: started under the reaper, logged, health-checked, stopped as a whole tree.

The server's stdout and stderr go to a log file and an in-memory tail; start-up memory lines are
parsed as they arrive. :meth:`ServerProcess.wait_ready` polls the engine's health endpoint and,
if the server exits first, names the cause from its log in one line (:func:`speclab.servers.causes.describe_exit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import aiohttp

from speclab.model.errors import ServerNotReadyError

from .backends.base import ExitCause, MemoryLines
from .backends.vllm import EXIT_CAUSES, MEMORY_LINES
from .causes import describe_exit
from .launcher import launch
from .memory import MemoryInfo
from .reaper import PID_LINE

LineCallback = Callable[[str, str], None]  # (label, line)


def server_status(returncode: int | None) -> int | None:
    """The reaper exits 128+N when its server died of signal N: as a negative code, like Popen's."""
    if returncode is not None and returncode > 128 and returncode - 128 in {s.value for s in signal.Signals}:
        return -(returncode - 128)
    return returncode


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _spawn(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


class _Child:
    """The reaper as ``asyncio.subprocess.Process`` offers it (pid, returncode, wait, send_signal), for a
    ``Popen`` started on the launching thread (``launcher``) rather than on the event loop's."""

    WAIT_POLL_S = 0.02

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout: asyncio.StreamReader | None = None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            await asyncio.sleep(self.WAIT_POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self._popen.poll() is None:
            self._popen.send_signal(sig)
        else:
            raise ProcessLookupError(self.pid)


class ServerProcess:
    def __init__(
        self,
        label: str,
        argv: list[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        base_url: str,
        grace_s: float = 10.0,
        tail_lines: int = 200,
        on_line: LineCallback | None = None,
        memory_lines: MemoryLines = MEMORY_LINES,
        health_path: str = "/health",
        exit_causes: Sequence[ExitCause] = EXIT_CAUSES,
    ) -> None:
        """``memory_lines``, ``health_path`` and ``exit_causes`` are the engine's (its backend's)
        start-up lines, readiness endpoint and death messages."""
        self.label = label
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.base_url = base_url
        self.grace_s = grace_s
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.memory = MemoryInfo()
        self._memory_lines = memory_lines
        self.health_path = health_path
        self._exit_causes = exit_causes
        self.server_pid: int | None = None
        self._on_line = on_line
        self._proc: _Child | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def reaper_pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "speclab.servers.reaper", "--parent", str(os.getpid()),
               "--grace", f"{self.grace_s:g}", "--", *self.argv]
        popen = await launch(_spawn, cmd, {**os.environ, **self.env})
        self._proc = child = _Child(popen)
        assert popen.stdout is not None
        stream = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), popen.stdout)
        child.stdout = stream
        self._reader = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        with self.log_path.open("a", encoding="utf-8") as log:
            while True:
                raw = await stream.readline()
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith(PID_LINE):
                    with contextlib.suppress(ValueError):
                        self.server_pid = int(line[len(PID_LINE):])
                    continue
                log.write(line + "\n")
                log.flush()
                self.tail.append(line)
                self.memory.update(line, self._memory_lines)
                if self._on_line is not None:
                    self._on_line(self.label, line)

    async def wait_ready(self, timeout: float, *, interval: float = 0.1) -> float:
        """Seconds until the health endpoint answered 200; ServerNotReadyError naming the cause otherwise."""
        assert self._proc is not None, "start() first"
        started = time.monotonic()
        deadline = started + timeout
        client_timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=client_timeout) as session:
            while True:
                if self._proc.returncode is not None:
                    await self._drain()
                    raise ServerNotReadyError(f"{self.label}: server {describe_exit(server_status(self.returncode), self.tail, self._exit_causes)}")
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    async with session.get(f"{self.base_url}{self.health_path}") as resp:
                        if resp.status == 200:
                            return time.monotonic() - started
                if time.monotonic() >= deadline:
                    last = next((ln for ln in reversed(self.tail) if ln.strip()), "no output")
                    await self.stop()
                    raise ServerNotReadyError(
                        f"{self.label}: server not ready after {timeout:g} s (no 200 from {self.base_url}{self.health_path}); "
                        f"last log line: {last}"
                    )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._proc.wait(), interval)

    async def exit_cause(self, timeout: float) -> str | None:
        """If the server exits within ``timeout`` s, why (one line, from its log); else None."""
        if self._proc is None:
            return None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proc.wait(), timeout)
        if self._proc.returncode is None:
            return None
        await self._drain()
        return describe_exit(server_status(self.returncode), self.tail, self._exit_causes)

    async def _drain(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 5.0)

    async def stop(self) -> int | None:
        """SIGTERM the reaper (which stops the server's whole tree); SIGKILL if it does not finish."""
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.grace_s + 5.0)
            except asyncio.TimeoutError:
                for target in (self.server_pid, proc.pid):
                    if target:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(target, signal.SIGKILL)
                await proc.wait()
        await self._drain()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        return proc.returncode
