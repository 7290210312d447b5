"""Probing an attached server: whatever it answers, exit 3 in one line naming the URL and the cause.

Each server here is a real aiohttp server on 127.0.0.1 (a free port) whose ``/health`` and
``/v1/models`` answer the way a wrong server, a proxy's error page or a hung server would.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from speclab.model.errors import ServerNotReadyError
from speclab.model.exit_codes import ExitCode
from speclab.servers import identity
from speclab.servers.manager import attach, probe_attached

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="")


class Server:
    """One aiohttp server; ``release`` lets a handler that waits forever go at teardown."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self, health: Handler, models: Handler) -> Server:
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        assert site._server is not None
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    made = Server()
    try:
        yield made
    finally:
        made.release.set()
        if made.runner is not None:
            await made.runner.cleanup()


async def _refused(server: Server, health: Handler, models: Handler, timeout: float = 10.0) -> str:
    await server.start(health, models)
    with pytest.raises(ServerNotReadyError) as caught:
        await probe_attached(attach("a", server.base_url), timeout=timeout)
    assert caught.value.exit_code == ExitCode.SERVER_NOT_READY
    message = str(caught.value)
    assert "\n" not in message
    return message


def _answer(body: bytes, content_type: str) -> Handler:
    async def models(_: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": content_type})

    return models


@pytest.mark.parametrize(("body", "content_type", "why"), [
    (b"[1,2]", "application/json", "answered a JSON list, not a JSON object with a data list"),
    (b'{"object": "list"}', "application/json", "answered an object without data, not a JSON object with a data list"),
    (b'{"data": 5}', "application/json", "answered an object whose data is a number, not a JSON object with a data list"),
    (b"{oops", "application/json", "answered invalid JSON (Expecting property name enclosed in double quotes"),
    (b"<html>hi</html>", "text/html", "answered with content type text/html, not JSON"),
    (b'{"data": [{"object": "model"}, {"id": 7}]}', "application/json", "lists no model"),
])
async def test_a_models_answer_that_is_not_the_openai_shape_is_exit_3_naming_it(
        server: Server, body: bytes, content_type: str, why: str) -> None:
    message = await _refused(server, _ok, _answer(body, content_type))
    assert message.startswith(f"a: {server.base_url}/v1/models {why}")


async def test_a_models_answer_without_a_content_type_says_so() -> None:
    # aiohttp always sends a Content-Type; this server answers every request by hand, without one.
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{"data": []}')
        await writer.drain()
        writer.close()

    raw = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with raw:
        url = f"http://127.0.0.1:{raw.sockets[0].getsockname()[1]}"
        with pytest.raises(ServerNotReadyError) as caught:
            await probe_attached(attach("a", url), timeout=10.0)
    assert str(caught.value) == f"a: {url}/v1/models answered without a content type, not JSON"


async def test_a_json_models_answer_with_a_suffixed_json_type_is_read(server: Server) -> None:
    await server.start(_ok, _answer(b'{"object": "list", "data": [{"id": "m-1"}]}', "application/vnd.x+json"))
    probed = await probe_attached(attach("a", server.base_url), timeout=10.0)
    assert probed.model_name == "m-1"


async def test_a_health_that_never_answers_names_the_timeout(server: Server) -> None:
    async def hang(_: web.Request) -> web.Response:
        await server.release.wait()
        return web.Response(text="")

    message = await _refused(server, hang, _answer(b"{}", "application/json"), timeout=0.3)
    assert message == f"a: {server.base_url}/health: no answer within 0.3 s"


async def test_a_models_list_that_never_answers_names_the_timeout(server: Server) -> None:
    async def hang(_: web.Request) -> web.Response:
        await server.release.wait()
        return web.Response(text="")

    message = await _refused(server, _ok, hang, timeout=0.3)
    assert message == f"a: {server.base_url}/v1/models: no answer within 0.3 s"


async def test_a_server_that_is_not_there_still_says_cannot_reach() -> None:
    with socket.socket() as s:  # bound and let go: nobody listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerNotReadyError) as caught:
        await probe_attached(attach("a", f"http://127.0.0.1:{port}"), timeout=5.0)
    message = str(caught.value)
    assert message.startswith(f"a: cannot reach http://127.0.0.1:{port}: Cannot connect to host")
    assert "\n" not in message


def test_a_port_holder_whose_command_line_has_a_newline_is_quoted_on_one_line() -> None:
    # A multi-line ``python -c`` script holds the port: its command line carries newlines.
    script = "import socket, sys\ns = socket.create_server(('127.0.0.1', 0))\nprint(s.getsockname()[1], flush=True)\nsys.stdin.read()"
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as holder:  # leaving closes its stdin: it exits, and is waited for
        assert holder.stdout is not None
        port = int(holder.stdout.readline())  # it listens once it has printed its port
        with pytest.raises(ServerNotReadyError) as caught:
            identity.require_free_port("baseline", "127.0.0.1", port, "server.base_port + 0")
    message = str(caught.value)
    assert message.startswith(f"baseline: port {port} (server.base_port + 0) is already in use by pid {holder.pid} (")
    assert "\n" not in message and "\r" not in message
    assert r"import socket, sys\ns = socket" in message
