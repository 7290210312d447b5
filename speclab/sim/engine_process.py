"""The engine core in a process of its own, as vLLM 0.33 runs ``EngineCore`` beside its API server.

The server process keeps HTTP, tokenizing, SSE and metrics; the engine process builds the models
and computes steps. On a 2-core host that gives the step loop a core to itself (one process did
both and fell behind its modelled clock at about 24 sequences in flight with a k=4 draft).

The two talk over a socket pair, one message per frame (a 4-byte length, then a pickle):
``("start", config)`` is answered once by ``("ready", memory, notes)`` or ``("error", exc)``; then
``("add", request)`` and ``("step", now)`` are each answered in order (``("ok", ...)`` or
``("error", exc)``), and ``("abort", request_id)`` is not answered. The engine process ignores
SIGINT and SIGTERM (the server decides when to stop, after its grace period) and exits when the
server's end of the socket closes, however the server went away.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

from . import logs
from .api import EngineConfig, EngineRequest, MemoryFacts, StepResult, Tokenizer
from .engine_client import EngineCoreDiedError
from .step_gc import StepCollector
from .tokenizer import load_tokenizer

_HEADER = struct.Struct("!I")
_CLOSE_WAIT_S = 5.0
CORE_KILLED_LINE = "the engine core process did not exit within {seconds:g} s of its socket closing; killed"


def _frame(message: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def _read_frame(stream: BinaryIO) -> tuple[Any, ...] | None:
    """The next message, or None at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    message: tuple[Any, ...] = pickle.loads(payload)
    return message


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip (so the server raises the same class), else its text."""
    try:
        return pickle.loads(pickle.dumps(exc))  # type: ignore[no-any-return]
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "its socket closed"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class EngineProcess:
    """Implements ``engine_client.EngineClient`` over an engine core in a child process."""

    def __init__(self, config: EngineConfig, proc: subprocess.Popen[bytes], sock: socket.socket,
                 memory: MemoryFacts, notes: list[str]) -> None:
        self.config = config
        self.tokenizer: Tokenizer = load_tokenizer(config.model)
        self.memory = memory
        self.notes = notes
        self.pid = proc.pid
        self._proc = proc
        self._sock = sock
        self._opening: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: collections.deque[asyncio.Future[tuple[Any, ...]]] = collections.deque()
        self._unfinished = False
        self._gone: str | None = None
        self._closed = False

    @classmethod
    def start(cls, config: EngineConfig) -> EngineProcess:
        """Start the engine process and build the engine there; raises what building it raised."""
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # where this ``speclab`` is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        proc = subprocess.Popen([sys.executable, "-m", "speclab.sim.engine_process", str(theirs.fileno())],
                                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        try:
            ours.sendall(_frame(("start", config)))
            with ours.makefile("rb") as stream:
                reply = _read_frame(stream)
            if reply is None:
                raise EngineCoreDiedError(f"the engine core process died while starting ({_exit_text(proc.wait())})")
            if reply[0] == "error":
                raise reply[1]
        except BaseException:
            ours.close()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            raise
        return cls(config, proc, ours, reply[1], reply[2])

    async def _connect(self) -> asyncio.StreamWriter:
        if self._gone is not None:
            raise EngineCoreDiedError(self._gone)
        if self._opening is None:  # once, however many requests arrive at the start
            self._opening = asyncio.ensure_future(asyncio.open_unix_connection(sock=self._sock))
        reader, writer = await asyncio.shield(self._opening)
        if self._writer is None:
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader))
        return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(_HEADER.size)
                payload = await reader.readexactly(_HEADER.unpack(header)[0])
                message: tuple[Any, ...] = pickle.loads(payload)
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_result(message)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            for _ in range(100):  # the process is on its way out: wait a moment for its exit status
                if self._proc.poll() is not None:
                    break
                await asyncio.sleep(0.01)
            self._gone = f"the engine core process died ({_exit_text(self._proc.poll())})"
        except Exception as exc:  # a reply that does not unpickle: the two sides no longer agree
            self._gone = f"the engine core's reply could not be read ({type(exc).__name__}: {exc})"
        finally:
            if self._gone is None:
                self._gone = "the connection to the engine core was closed"
            while self._waiting:
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_exception(EngineCoreDiedError(self._gone))

    async def _ask(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        writer = await self._connect()
        waiter: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        writer.write(_frame(message))
        reply = await waiter
        if reply[0] == "error":
            raise reply[1]
        return reply

    async def add_request(self, request: EngineRequest) -> None:
        await self._ask(("add", request))
        self._unfinished = True

    def abort_request(self, request_id: str) -> None:
        if self._writer is None or self._gone is not None:
            return
        self._writer.write(_frame(("abort", request_id)))
        self._unfinished = True  # the abort's own output is still to come

    def has_unfinished(self) -> bool:
        return self._unfinished

    async def step(self, now: float) -> StepResult:
        reply = await self._ask(("step", now))
        self._unfinished = reply[2]
        result: StepResult = reply[1]
        return result

    def close(self) -> None:
        """Close the socket (the engine process exits on it) and reap the process; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._reader_task is not None:
            self._reader_task.cancel()
        # Shut the connection down first: the event loop's transport holds the descriptor until
        # its next turn, and the engine process must read end-of-file now, not when the loop ends.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._writer is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed: the socket closes below
                self._writer.close()
        self._sock.close()
        try:
            self._proc.wait(timeout=_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            logs.warning(logs.SRC_CORE, CORE_KILLED_LINE.format(seconds=_CLOSE_WAIT_S))
            self._proc.kill()
            self._proc.wait()


def serve(sock: socket.socket) -> int:
    """The engine process: build the engine from the first message, then answer until the socket closes."""
    from .engine import build_engine

    with sock, sock.makefile("rb") as stream:
        start = _read_frame(stream)
        if start is None:
            return 0
        try:
            engine = build_engine(start[1])
        except Exception as exc:
            sock.sendall(_frame(("error", _portable(exc))))
            return 1
        collector = StepCollector()
        collector.start()
        sock.sendall(_frame(("ready", engine.memory, list(engine.notes))))
        while (message := _read_frame(stream)) is not None:
            op = message[0]
            if op == "abort":
                engine.abort_request(message[1])
                continue
            try:
                if op == "add":
                    engine.add_request(message[1])
                    reply: tuple[Any, ...] = ("ok",)
                else:
                    reply = ("ok", engine.step(message[1]), engine.has_unfinished())
            except Exception as exc:
                reply = ("error", _portable(exc))
            try:
                sock.sendall(_frame(reply))
            except OSError:
                return 0  # the server went away mid-step
            if op == "step" or reply[0] == "error":
                collector.after_step(failed=reply[0] == "error")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(serve(socket.socket(fileno=int(sys.argv[1]))))
