"""A ground-truth streaming server for bench_loadgen: vLLM-shaped SSE that logs its own side of every request.

It speaks enough of vLLM's OpenAI-compatible API for a client to attach (``/health``,
``/v1/models``, ``/version``, ``/metrics``, streamed and plain ``/v1/completions`` and
``/v1/chat/completions`` with ``[DONE]``, ``stream_options.include_usage``,
``continuous_usage_stats`` and ``return_token_ids``) and streams ``--tokens`` tokens (at most the
request's ``max_tokens``), the first after ``--ttft-ms``, then one every ``--itl-ms``.

Per request, keyed by its ``X-Request-Id``, it keeps the kernel's receive time of the first bytes of
the request (``SO_TIMESTAMPNS``: the earliest the server can know it arrived, before its own event
loop had a chance to be late), the moment its own loop read them, the moment it handed the first
token chunk to the socket and the moment it wrote ``[DONE]``, all on the wall clock. A client's
TTFT minus this server's (first write − arrival) is what the client added. On SIGTERM or SIGINT
it writes ``--records FILE`` (JSON: the records plus its own CPU time) and exits 0.

The HTTP/1.1 layer is raw non-blocking sockets on uvloop's reader callbacks and one timer wheel:
small enough to read, cheap enough that the server is not what a client waits for (about 40% of
a core at 300 req/s on a 2-core host, most of it the loopback send itself), and it gives the
receive timestamp no HTTP framework exposes.

    python bench/loadgen_server.py --records FILE [--port 0] [--ttft-ms 50] [--itl-ms 10] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadgen_wire import ShapeKey, error_response, metrics_text, request_id_bytes, response, shape, whole_body

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export it
_ANC_SIZE = socket.CMSG_SPACE(16)
_RECV_SIZE = 65536
_MAX_HEAD = 65536


@dataclass(frozen=True)
class Settings:
    model: str
    ttft_s: float
    itl_s: float
    tokens: int


@dataclass(slots=True)
class Record:
    """The server's side of one request (wall-clock seconds)."""

    request_id: str
    path: str
    rx_kernel: float  # the kernel's receive time of the request's first bytes (or rx_read without it)
    rx_read: float  # when this loop read them
    first_write: float | None = None  # when the first token chunk was handed to the socket
    done_write: float | None = None  # when [DONE] was
    tokens: int = 0
    aborted: bool = False  # the client closed before the end


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec + nsec * 1e-9
    return None


def _cpu() -> float:
    return time.process_time()


class Server:
    """Accepts connections and keeps every request's record; counters feed ``/metrics``."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.loop = loop
        self.records: dict[str, Record] = {}
        self.running = 0
        self.finished = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.unnamed = 0
        self.cpu_first: float | None = None  # own CPU seconds when the first generation request arrived
        self.cpu_last = 0.0  # ... and when the latest one finished
        self.conns: set[Connection] = set()
        self.wheel = Wheel(loop)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def listen(self, host: str, port: int) -> int:
        sock = self.listener
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # inherited: the first bytes get stamped too
        sock.bind((host, port))
        sock.listen(4096)
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)
        return int(sock.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns.add(Connection(self, sock))

    def close(self) -> None:
        self.loop.remove_reader(self.listener.fileno())
        self.listener.close()
        self.wheel.close()
        for conn in list(self.conns):
            conn.close()

    def dump(self, path: Path) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        data = {
            "settings": {"model": self.settings.model, "ttft_s": self.settings.ttft_s,
                         "itl_s": self.settings.itl_s, "tokens": self.settings.tokens},
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "traffic_cpu_s": self.cpu_last - (self.cpu_first or 0.0),
            "max_rss_kb": usage.ru_maxrss,
            "requests_without_id": self.unnamed,
            "records": [
                [r.request_id, r.path, r.rx_kernel, r.rx_read, r.first_write, r.done_write, r.tokens, r.aborted]
                for r in self.records.values()
            ],
            "fields": ["request_id", "path", "rx_kernel", "rx_read", "first_write", "done_write", "tokens", "aborted"],
        }
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)


class Connection:
    """One keep-alive connection: reads requests, writes responses, streams at most one at a time."""

    __slots__ = ("buf", "closed", "fd", "out", "rx", "server", "sock", "streaming")

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.buf = b""
        self.out = bytearray()
        self.rx: tuple[float, float] | None = None  # (kernel, read) of the pending request's first bytes
        self.streaming = False
        self.closed = False
        server.loop.add_reader(self.fd, self._readable)

    # -- input -----------------------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_RECV_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        read_at = time.time()
        if not data:
            self.close()
            return
        if self.rx is None:
            self.rx = (_kernel_time(ancillary) or read_at, read_at)
        self.buf += data
        if len(self.buf) > _MAX_HEAD and b"\r\n\r\n" not in self.buf:
            self.send(error_response(413, "request head too large"))
            self.close()
            return
        self._parse()

    def _parse(self) -> None:
        while not self.streaming and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            rx = self.rx or (time.time(), time.time())
            self.rx = None if not self.buf else rx  # pipelined bytes already arrived with this read
            parts = lines[0].split(" ")
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            try:
                self._handle(method, path.split("?")[0], headers, body, rx)
            except Exception as error:  # a bug here must show, not hang the client
                print(f"error on {method} {path}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
                self.send(error_response(500, f"{type(error).__name__}: {error}"))
                self.close()
                return
            if headers.get("connection", "").lower() == "close" and not self.streaming:
                self.close()

    def _handle(self, method: str, path: str, headers: dict[str, str], body: bytes, rx: tuple[float, float]) -> None:
        server = self.server
        model = server.settings.model
        if path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                self.send(error_response(405, f"{path} takes POST"))
                return
            self._generate(path, headers, body, rx)
        elif path == "/health":
            self.send(response(200, b"", b"text/plain"))
        elif path == "/v1/models":
            listing = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "loadgen-bench",
                                                   "root": model, "max_model_len": 4096}]}
            self.send(response(200, json.dumps(listing).encode()))
        elif path == "/version":
            self.send(response(200, b'{"version":"0.33.0","server":"loadgen-bench ground truth"}'))
        elif path == "/metrics":
            self.send(response(200, metrics_text(server.settings.model, server.running, server.finished,
                                                    server.prompt_tokens, server.generation_tokens),
                               b"text/plain; version=0.0.4"))
        else:
            self.send(error_response(404, f"no route {path}"))

    # -- generation ------------------------------------------------------------------------------

    def _generate(self, path: str, headers: dict[str, str], body: bytes, rx: tuple[float, float]) -> None:
        server = self.server
        try:
            req = json.loads(body)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as error:
            self.send(error_response(400, f"invalid JSON body: {error}"))
            return
        chat = path.endswith("chat/completions")
        rid = headers.get("x-request-id") or ""
        if not rid:
            server.unnamed += 1
            rid = f"unnamed-{server.unnamed}"
        tokens = min(server.settings.tokens, int(req.get("max_tokens") or server.settings.tokens))
        if chat:
            messages = req.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = str(req.get("prompt") or "")
        options = req.get("stream_options") or {}
        key = ShapeKey(chat=chat, token_ids=bool(req.get("return_token_ids")),
                       continuous=bool(options.get("continuous_usage_stats")),
                       include_usage=bool(options.get("include_usage")), prompt_tokens=max(1, len(prompt.split())),
                       tokens=tokens, model=str(req.get("model") or server.settings.model))
        stream = Stream(self, Record(rid, path, rx[0], rx[1]), key, streamed=bool(req.get("stream")))
        server.records[rid] = stream.record
        if server.cpu_first is None:
            server.cpu_first = _cpu()
        server.running += 1
        server.prompt_tokens += key.prompt_tokens
        self.streaming = True
        due = server.loop.time() + server.settings.ttft_s
        if stream.streamed:
            self.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                      b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\nx-request-id: "
                      + stream.rid + b"\r\n\r\n")
        else:
            due += server.settings.itl_s * max(tokens - 1, 0)
        server.wheel.put(due, stream)

    def finished(self, stream: Stream) -> None:
        server = self.server
        server.running -= 1
        server.finished += 1
        server.generation_tokens += stream.record.tokens
        server.cpu_last = _cpu()
        self.streaming = False
        if self.buf:
            self._parse()

    # -- output ----------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        if sent < len(data):
            self.out += data[sent:]
            self.server.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        del self.out[:sent]
        if not self.out:
            self.server.loop.remove_writer(self.fd)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.streaming:
            self.server.running -= 1
        loop = self.server.loop
        loop.remove_reader(self.fd)
        if self.out:
            loop.remove_writer(self.fd)
        self.sock.close()
        self.server.conns.discard(self)


class Stream:
    """One response; the server's wheel calls ``step`` when its next chunk is due (no task per request)."""

    __slots__ = ("conn", "key", "next", "origin", "record", "rid", "shape", "streamed")

    def __init__(self, conn: Connection, record: Record, key: ShapeKey, streamed: bool) -> None:
        self.conn, self.record, self.key, self.streamed = conn, record, key, streamed
        self.rid = request_id_bytes(record.request_id)
        self.shape = shape(key)
        self.next = 0  # the token to write at the next step
        self.origin = 0.0  # loop time of the first token

    def step(self, now: float) -> None:
        conn, record = self.conn, self.record
        if conn.closed:
            record.aborted = True
            return
        if not self.streamed:
            record.first_write = record.done_write = time.time()
            record.tokens = self.key.tokens
            conn.send(response(200, whole_body(self.key, record.request_id)))
            conn.finished(self)
            return
        i = self.next
        data = self.shape.event(self.rid, i)
        if i == 0:
            self.origin = now
            record.first_write = time.time()
        record.tokens = i + 1
        if i == self.key.tokens - 1:
            record.done_write = time.time()
            conn.send(data + self.shape.end(self.rid))
            conn.finished(self)
            return
        conn.send(data)
        self.next = i + 1
        server = conn.server
        server.wheel.put(self.origin + self.next * server.settings.itl_s, self)


class Wheel:
    """Streams due per millisecond of loop time, served by one timer: a chunk costs a list append,
    not a timer handle (uvloop's timers tick in milliseconds anyway)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.slots: dict[int, list[Stream]] = {}
        self.armed: int | None = None  # the slot the timer is set for
        self.handle: asyncio.TimerHandle | None = None

    def put(self, due: float, stream: Stream) -> None:
        slot = math.ceil(due * 1000.0 - 1e-6)
        self.slots.setdefault(slot, []).append(stream)
        if self.armed is None or slot < self.armed:
            self._arm(slot)

    def _arm(self, slot: int) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.armed = slot
        self.handle = self.loop.call_at(slot / 1000.0, self._fire)

    def _fire(self) -> None:
        self.handle = self.armed = None
        now = self.loop.time()
        current = math.floor(now * 1000.0 + 1e-6)
        for slot in sorted(s for s in self.slots if s <= current):
            for stream in self.slots.pop(slot):
                stream.step(now)
        if self.slots:
            self._arm(max(min(self.slots), current + 1))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.slots.clear()


async def serve(settings: Settings, host: str, port: int, records: Path) -> None:
    loop = asyncio.get_running_loop()
    server = Server(settings, loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = server.listen(host, port)
    print(f"listening http://{host}:{bound}", flush=True)
    await stop.wait()
    server.close()
    server.dump(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, required=True, help="where the records go on SIGTERM")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="loadgen-bench")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    if args.tokens < 1 or args.ttft_ms < 0 or args.itl_ms < 0:
        parser.error("--tokens must be at least 1, --ttft-ms and --itl-ms not negative")
    settings = Settings(args.model, args.ttft_ms / 1000.0, args.itl_ms / 1000.0, args.tokens)
    import uvloop

    uvloop.run(serve(settings, args.host, args.port, args.records))
    sys.exit(0)


if __name__ == "__main__":
    main()
