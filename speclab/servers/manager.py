"""The servers of one session: start a lab's variants, relaunch one, stop all, or attach to a URL.

The session talks only to :class:`ServerManager`; it gets a :class:`RunningServer` per variant
with everything the traffic engine, the scraper, the UI's server panel and the report need.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import aiohttp

from speclab.model.errors import InputError, ServerNotReadyError
from speclab.model.lab import Effective, Lab
from speclab.model.records import Event
from speclab.model.spec_options import SPEC_OPTION_KEYS

from . import identity
from .argv import redact_argv, shell_line
from .backends import EngineId
from .backends.base import SIM_MODULE, Backend, Launch
from .backends.registry import BACKENDS, backend
from .backends.vllm import API_KEY_ENV
from .memory import MemoryInfo
from .process import LineCallback, ServerProcess, free_port

ATTACHED: Literal["attached"] = "attached"
SETTING_KEYS = (
    "num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
    "async_scheduling", "scheduling_policy", "gpu_memory_utilization", "max_model_len", "tensor_parallel_size",
)


@dataclass
class RunningServer:
    variant: str
    base_url: str
    model_name: str | None  # what clients send as "model"; None for an attach not yet probed
    engine: EngineId | Literal["attached"]
    argv: list[str] = field(default_factory=list)  # redacted
    command: str = ""  # shell-quoted, redacted
    pid: int | None = None  # the server's pid (under the reaper)
    memory: MemoryInfo = field(default_factory=MemoryInfo)
    settings: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False
    log_path: Path | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets: never print
    status: str = "starting"
    simulated: bool = False  # launched on the simulator, or an attached server serving speclab_sim_* series
    _process: ServerProcess | None = field(default=None, repr=False)
    _token: str = field(default="", repr=False)  # the launch token it must serve (identity.py)

    @property
    def backend(self) -> Backend:
        """Its engine's backend; an attached server is read as the simulator if it serves the
        simulator's series, else as vLLM (whose API speclab attaches to)."""
        if self.engine != ATTACHED:
            return BACKENDS[self.engine]
        return next((b for b in BACKENDS.values() if b.simulated == self.simulated), BACKENDS[EngineId.VLLM])

    @property
    def log_tail(self) -> tuple[str, ...]:
        return tuple(self._process.tail) if self._process else ()


def settings_of(lab: Lab, eff: Effective) -> dict[str, Any]:
    out = {k: getattr(eff, k) for k in SETTING_KEYS}
    out["method"] = lab.draft.method if (eff.speculative and lab.draft) else None
    out["gpus"] = list(eff.gpus)
    if eff.speculative:  # the knobs beyond k, None where vLLM's default runs
        out.update({key: None for key in SPEC_OPTION_KEYS})
        out.update(eff.spec_options)
    return out


def parse_attach(spec: str) -> tuple[str, str]:
    """``[LABEL=]URL`` -> (label, url); the label defaults to host:port."""
    label, sep, url = spec.partition("=")
    if not sep or "://" in label:
        label, url = "", spec
    expected = f"--attach {spec!r}: expected [LABEL=]http://HOST:PORT"
    try:
        parsed = urlparse(url)
        port = parsed.port  # a port that is not a number, or out of range, raises here
    except ValueError as error:  # e.g. "Invalid IPv6 URL", "Port out of range 0-65535"
        raise InputError(f"{expected} ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InputError(expected)
    if not parsed.hostname:
        raise InputError(f"{expected} (no host)")
    if port == 0 or "," in parsed.netloc:
        raise InputError(f"{expected} (one server per --attach, on a port from 1 to 65535)")
    return (label or parsed.netloc), url.rstrip("/")


def attach(label: str, url: str, headers: Mapping[str, str] | None = None) -> RunningServer:
    """A server speclab did not launch; :func:`probe_attached` fills in its model name."""
    _, clean = parse_attach(f"{label}={url}")
    return RunningServer(variant=label, base_url=clean, model_name=None, engine=ATTACHED,
                         headers=dict(headers or {}), status="attached", command=f"(attached) {clean}")


def _cause(error: BaseException, timeout: float) -> str:
    """An aiohttp or socket error on one line, naming its cause: a timeout's text is empty
    (``str(TimeoutError())``), so it is named by the limit that ran out."""
    if isinstance(error, asyncio.TimeoutError):
        return f"no answer within {timeout:g} s"
    return " ".join(str(error).split()) or type(error).__name__


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "null"


def _served_models(label: str, url: str, content_type: str, raw: bytes) -> list[str]:
    """The model ids an OpenAI ``/v1/models`` answer lists (a JSON object with a ``data`` list);
    ServerNotReadyError, one line naming what came instead, when it is not that."""
    if content_type != "application/json" and not content_type.endswith("+json"):
        got = f"with content type {content_type}" if content_type else "without a content type"
        raise ServerNotReadyError(f"{label}: {url} answered {got}, not JSON")
    try:
        body = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError too
        raise ServerNotReadyError(f"{label}: {url} answered invalid JSON ({' '.join(str(error).split())[:120]})") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        if not isinstance(body, dict):
            found = f"a JSON {_json_type(body)}"
        else:
            found = "an object without data" if data is None else f"an object whose data is a {_json_type(data)}"
        raise ServerNotReadyError(f"{label}: {url} answered {found}, not a JSON object with a data list")
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


METRICS_PROBE_S = 3.0  # is an attached server a simulator? A /metrics that hangs is read later, not waited on here


async def probe_attached(server: RunningServer, timeout: float = 10.0) -> RunningServer:
    """Check ``/health`` and learn the served model from ``/v1/models``; ServerNotReadyError if not up."""
    url = f"{server.base_url}/health"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout), headers=server.headers) as s:
            async with s.get(url) as resp:
                if resp.status != 200:
                    raise ServerNotReadyError(f"{server.variant}: {url} answered {resp.status}")
            url = f"{server.base_url}/v1/models"
            async with s.get(url) as resp:
                if resp.status != 200:
                    raise ServerNotReadyError(f"{server.variant}: {url} answered {resp.status}")
                content_type = resp.content_type if resp.headers.get(aiohttp.hdrs.CONTENT_TYPE) else ""
                raw = await resp.read()
            # An attached simulator is still simulated: it serves its own health series.
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with s.get(f"{server.base_url}/metrics", timeout=aiohttp.ClientTimeout(total=METRICS_PROBE_S)) as resp:
                    text = await resp.text() if resp.status == 200 else ""
                    server.simulated = any(b.simulated and b.recognises(text) for b in BACKENDS.values())
    except asyncio.TimeoutError as error:  # first: aiohttp's timeout errors are ClientErrors too
        raise ServerNotReadyError(f"{server.variant}: {url}: {_cause(error, timeout)}") from None
    except (aiohttp.ClientError, OSError) as error:
        raise ServerNotReadyError(f"{server.variant}: cannot reach {server.base_url}: {_cause(error, timeout)}") from None
    models = _served_models(server.variant, url, content_type, raw)
    if not models:
        raise ServerNotReadyError(f"{server.variant}: {url} lists no model")
    server.model_name = models[0]
    return server


class ServerManager:
    def __init__(
        self,
        lab: Lab,
        engine: EngineId | str,
        *,
        log_dir: str | Path,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        ready_timeout: float | None = None,
        grace_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        on_log: LineCallback | None = None,
        python: str = sys.executable,
        sim_module: str = SIM_MODULE,
        time_scale: float = 1.0,
    ) -> None:
        self.lab = lab
        self.time_scale = time_scale
        self.backend: Backend = backend(engine)
        self.engine: EngineId = self.backend.id
        if not self.backend.simulated and time_scale != 1.0:
            raise InputError(f"--time-scale {time_scale:g}: a time scale is for the simulator only; "
                             f"a real {self.engine} server always runs at 1")
        self.log_dir = Path(log_dir)
        self.host = host
        self.ready_timeout = ready_timeout if ready_timeout is not None else self.backend.readiness.start_timeout_s
        self.grace_s = grace_s
        self.clock = clock
        self.servers: dict[str, RunningServer] = {}
        self.events: list[Event] = []
        self._api_key = api_key
        self._on_log = on_log
        self._python = python
        self._sim_module = sim_module

    # -- launching ------------------------------------------------------------------------------

    def _port_for(self, variant: str, taken: set[int] | None = None) -> int:
        if variant in self.servers and self.servers[variant].engine != ATTACHED:
            return int(urlparse(self.servers[variant].base_url).port or 0)
        if self.lab.server.base_port:
            port = self.lab.server.base_port + self.lab.variant_names.index(variant)
            identity.require_free_port(variant, self.host, port, f"server.base_port + {self.lab.variant_names.index(variant)}")
            return port
        taken = taken if taken is not None else set()
        port = free_port(self.host)
        while port in taken:
            port = free_port(self.host)
        taken.add(port)
        return port

    def _make(self, lab: Lab, variant: str, port: int) -> RunningServer:
        engine = self.backend
        argv = engine.argv(lab, variant, Launch(host=self.host, port=port, python=self._python, module=self._sim_module,
                                                time_scale=self.time_scale))
        env = engine.env(lab, variant, api_key=self._api_key)
        base_url = f"http://{self.host}:{port}"
        token = identity.new_token()
        process = ServerProcess(variant, argv, env={**env, identity.LAUNCH_TOKEN_ENV: token},
                                log_path=self.log_dir / f"{variant}.log", base_url=base_url,
                                grace_s=self.grace_s, on_line=self._on_log, memory_lines=engine.memory_lines,
                                health_path=engine.readiness.health_path, exit_causes=engine.exit_causes)
        eff = lab.effective(variant)
        return RunningServer(
            variant=variant, base_url=base_url, model_name=engine.served_model_name(lab), engine=engine.id,
            argv=redact_argv(argv), command=shell_line(argv, {k: v for k, v in env.items() if k != API_KEY_ENV}),
            memory=process.memory, settings=settings_of(lab, eff), baseline=not eff.speculative,
            log_path=process.log_path, simulated=engine.simulated, _process=process, _token=token,
        )

    async def _launch(self, server: RunningServer) -> RunningServer:
        process = server._process
        assert process is not None
        await process.start()
        try:
            await process.wait_ready(self.ready_timeout)
        finally:
            server.pid = process.server_pid
        await self._verify(server, process)
        server.status = "ready"
        return server

    async def _verify(self, server: RunningServer, process: ServerProcess) -> None:
        """The answering server must be the launched one; else exit 3 naming both (identity.py)."""
        expected = identity.Expected(
            label=server.variant, base_url=server.base_url, port=int(urlparse(server.base_url).port or 0),
            root_pid=process.reaper_pid, token=server._token, served_model=server.model_name or "",
            require_token=self.backend.readiness.serves_launch_token,
        )
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        why = await identity.mismatch(expected, headers)
        if why is None:
            return
        own = await process.exit_cause(timeout=5.0)
        await process.stop()
        server.status = "exited"
        raise ServerNotReadyError(f"{server.variant}: {why}" + (f"; the launched server {own}" if own else ""))

    async def start(self, variants: Iterable[str] | None = None) -> dict[str, RunningServer]:
        """Start the variants (all by default) concurrently; all ready, or all stopped and an error."""
        names = list(variants) if variants is not None else list(self.lab.variant_names)
        for name in names:
            self.lab.variant(name)
        taken: set[int] = set()
        new = {name: self._make(self.lab, name, self._port_for(name, taken)) for name in names}
        self.servers.update(new)
        results = await asyncio.gather(*(self._launch(s) for s in new.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            first = next((e for e in errors if isinstance(e, ServerNotReadyError)), errors[0])
            raise first
        return dict(self.servers)

    def check_relaunch(self, variant: str, changes: Mapping[str, Any]) -> Lab:
        """The lab ``variant`` would run with ``changes``; InputError (nothing stopped) if it can't."""
        old = self.servers.get(variant)
        if old is None or old.engine == ATTACHED:
            raise InputError(f"relaunch: no launched server for variant {variant!r}")
        try:
            return self.lab.with_changes(variant, dict(changes))
        except (ValueError, KeyError) as error:
            raise InputError(f"relaunch {variant}: {error}".splitlines()[0]) from None

    async def relaunch(self, variant: str, changes: Mapping[str, Any]) -> Event:
        """Restart one variant with changed settings while the others keep serving."""
        lab = self.check_relaunch(variant, changes)
        old = self.servers[variant]
        before = old.settings
        t0 = self.clock()
        old.status = "relaunching"
        if old._process is not None:
            await old._process.stop()
        port = int(urlparse(old.base_url).port or 0)
        identity.require_free_port(variant, self.host, port, "the port it had before the relaunch")
        server = self._make(lab, variant, port)
        self.servers[variant] = server
        started = time.monotonic()
        try:
            await self._launch(server)
        except ServerNotReadyError:
            server.status = "exited"
            raise
        self.lab = self.lab.with_changes(variant, dict(changes))  # not ``lab``: another variant may have relaunched meanwhile
        diff = {k: {"from": before.get(k), "to": server.settings.get(k)}
                for k in server.settings if before.get(k) != server.settings.get(k)}
        text = ", ".join(f"{k} {v['from']}->{v['to']}" for k, v in diff.items()) or "no setting changed"
        event = Event(
            t=t0, kind="relaunch", variant=variant, message=f"{variant} relaunched: {text}",
            data={"changes": diff, "ready_after_s": round(time.monotonic() - started, 3), "command": server.command},
        )
        self.events.append(event)
        return event

    def attach(self, label: str, url: str, headers: Mapping[str, str] | None = None) -> RunningServer:
        server = attach(label, url, headers)
        self.servers[label] = server
        return server

    async def stop(self) -> None:
        """Stop every launched server (SIGTERM to its tree, grace, SIGKILL); attached ones are left."""
        launched = [s for s in self.servers.values() if s._process is not None]
        await asyncio.gather(*(s._process.stop() for s in launched if s._process is not None), return_exceptions=True)
        for s in launched:
            if s.status != "exited":
                s.status = "stopped"

    async def __aenter__(self) -> ServerManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.stop()
