"""`speclab gateway LAB` and its switches: `set`, `weight`, `rollback`, `show`.

`speclab gateway LAB` starts the lab's servers and HAProxy in front of them (or, with
``--socket``, attaches to a running gateway and shows it) and stays in the foreground until
Ctrl-C, SIGTERM or ``--duration``, printing every change any command makes. The switches drive a
running gateway through its stats socket, found by ``--socket PATH`` or ``--report DIR``.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from speclab.model.exit_codes import ExitCode
from speclab.model.records import Event
from speclab.recording.preflight import require_writable_dir
from speclab.servers.backends.ids import AUTO

from .base import DefaultGroup, _guard
from .options import engine_option

if TYPE_CHECKING:  # the gateway package loads when a command runs
    from speclab.gateway.controller import GatewayController


def _target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """How a switch finds the running gateway: ``--report DIR`` or ``--socket PATH``."""
    fn = click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
                      help="the running gateway's report directory")(fn)
    return click.option("--socket", "socket_path", type=click.Path(path_type=Path), default=None,
                        help="the running gateway's stats socket")(fn)


def _handle_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A change's options: the running gateway, and ``--who`` for its event."""
    fn = _target_options(fn)
    return click.option("--who", default=None, help="who makes the change (default: user@host)")(fn)


@click.group(cls=DefaultGroup, invoke_without_command=False)
def gateway() -> None:
    """A real HAProxy in front of a lab's servers: `gateway LAB`, then `set`, `weight`, `rollback`, `show`."""


@gateway.command("open")
@click.argument("lab_name", metavar="LAB")
@click.option("--report", "report_dir", type=click.Path(path_type=Path), default=None,
              help="where haproxy.cfg, its maps, the manifests and events go (default: ./gateway-LAB)")
@engine_option()
@click.option("--variants", default=None, help="comma-separated subset of the lab's variants (the baseline included)")
@click.option("--tenant", "tenants", multiple=True, help="NAME=POOL (adds to the lab's [gateway] tenants)")
@click.option("--route", "routes", multiple=True, help="PATH-PREFIX=POOL or MODEL=POOL")
@click.option("--weight", "weights", multiple=True, help="POOL=PCT: a speculative pool's share of the canary pool")
@click.option("--tenant-header", default=None, help="request header naming the tenant (default: X-Tenant)")
@click.option("--port", type=int, default=None, help="the gateway's port on 127.0.0.1 (default: a free port)")
@click.option("--haproxy", "haproxy_bin", default=None, help="haproxy executable (default: haproxy on PATH)")
@click.option("--duration", type=float, default=None, help="stop after S seconds (default: until Ctrl-C)")
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), default=None,
              help="attach to the running gateway behind this stats socket instead of starting one")
def gateway_open(lab_name: str, **opts: Any) -> None:
    """Start LAB's servers behind HAProxy (or attach to a running gateway with --socket)."""
    _guard(lambda: run_gateway(lab_name, opts))


@gateway.command("set")
@click.argument("entry", metavar="TENANT|ROUTE")
@click.argument("pool")
@_handle_options
def gateway_set(entry: str, pool: str, **opts: Any) -> None:
    """Move a tenant or route to POOL (a variant, or `canary`), live."""
    _guard(lambda: _change(opts, lambda c, who: c.set(entry, pool, who=who)))


@gateway.command("weight")
@click.argument("shares", nargs=-1, required=True, metavar="POOL=PCT...")
@_handle_options
def gateway_weight(shares: tuple[str, ...], **opts: Any) -> None:
    """Set speculative pools' shares of the canary pool (the baseline takes the rest), live."""
    from speclab.gateway.routing import parse_share

    def body() -> int:
        parsed = dict(parse_share(s) for s in shares)  # bad input is refused before the socket is touched
        return _change(opts, lambda c, who: c.weight(parsed, who=who))

    _guard(body)


@gateway.command("rollback")
@_handle_options
def gateway_rollback(**opts: Any) -> None:
    """Every tenant and route, and the whole canary pool, to the baseline in one step."""
    _guard(lambda: _change(opts, lambda c, who: c.rollback(who=who)))


@gateway.command("show")
@click.option("--json", "as_json", is_flag=True, help="the routing as JSON")
@_target_options
def gateway_show(as_json: bool, **opts: Any) -> None:
    """Print what the running gateway routes by now."""
    _guard(lambda: asyncio.run(_show(opts, as_json)))


# -- bodies ---------------------------------------------------------------------------------------


def _who(opts: dict[str, Any]) -> str:
    return str(opts.get("who") or f"{getpass.getuser()}@{socket.gethostname()}")


async def _open(opts: dict[str, Any]) -> GatewayController:
    from speclab.gateway.controller import GatewayController

    return await GatewayController.open(socket=opts.get("socket_path"), report_dir=opts.get("report_dir"))


def _change(opts: dict[str, Any], action: Callable[[GatewayController, str], Awaitable[Event]]) -> int:
    async def body() -> int:
        controller = await _open(opts)
        try:
            before = await controller.info()
            event = await action(controller, _who(opts))
            after = await controller.info()
        finally:
            await controller.close()
        same = before.get("Pid") == after.get("Pid") and before.get("Start_time_sec") == after.get("Start_time_sec")
        click.echo(event.message)
        click.echo(f"applied live in {1000 * float(event.data['applied_s']):.1f} ms through {controller.api.socket_path}; "
                   f"HAProxy pid {after.get('Pid')} {'unchanged, no reload' if same else 'CHANGED'}, "
                   f"up {after.get('Uptime_sec')} s")
        return int(ExitCode.OK if same else ExitCode.INTERNAL_ERROR)

    return asyncio.run(body())


async def _show(opts: dict[str, Any], as_json: bool) -> int:
    controller = await _open(opts)
    try:
        routing, info = await controller.routing(), await controller.info()
    finally:
        await controller.close()
    if as_json:
        click.echo(json.dumps({**routing.to_dict(), "haproxy": {k: info.get(k) for k in ("Pid", "Version", "Uptime_sec")}}))
        return int(ExitCode.OK)
    for line in describe(routing):
        click.echo(line)
    click.echo(f"HAProxy {info.get('Version')} pid {info.get('Pid')}, up {info.get('Uptime_sec')} s, "
               f"socket {controller.api.socket_path}")
    return int(ExitCode.OK)


def describe(routing: Any) -> list[str]:
    lines = [f"tenants ({routing.tenant_header}): " + (", ".join(f"{k} -> {v}" for k, v in sorted(routing.tenants.items()))
                                                      or "none")]
    lines.append("routes: " + (", ".join(f"{k} -> {v}" for k, v in routing.routes.items()) or "none"))
    lines.append("canary pool (everything else): " + ", ".join(f"{v} {w}%" for v, w in routing.canary_weights().items()))
    return lines


# `gateway LAB` options that only shape a gateway it starts: with --socket they would be dropped.
_START_ONLY = (("report_dir", "--report"), ("engine", "--engine"), ("variants", "--variants"),
               ("tenants", "--tenant"), ("routes", "--route"), ("weights", "--weight"),
               ("tenant_header", "--tenant-header"), ("port", "--port"), ("haproxy_bin", "--haproxy"),
               ("duration", "--duration"))


def _start_only_given(opts: dict[str, Any]) -> list[str]:
    """The start-only options given (an unset option is None, empty, or the default engine)."""
    return [flag for key, flag in _START_ONLY
            if opts.get(key) not in (None, (), "") and not (key == "engine" and opts.get(key) == AUTO)]


def run_gateway(lab_name: str, opts: dict[str, Any]) -> int:
    from speclab.gateway.config import find_haproxy
    from speclab.gateway.routing import RoutingTable, parse_assignment, parse_share
    from speclab.model.errors import InputError
    from speclab.model.lab import load_lab
    from speclab.servers.engine import select_engine

    if opts.get("socket_path") is not None:
        given = _start_only_given(opts)
        if given:
            raise InputError(f"gateway LAB --socket attaches to a running gateway and shows it; {', '.join(given)} "
                             f"only apply when starting one (change a running one with "
                             f"`speclab gateway set|weight|rollback --socket PATH`)")
        return asyncio.run(_attach(load_lab(lab_name).name, opts))
    haproxy = find_haproxy(opts.get("haproxy_bin"))
    lab = load_lab(lab_name)
    variants = tuple(v.strip() for v in (opts.get("variants") or "").split(",") if v.strip()) or None
    for name in variants or ():
        if name not in lab.variant_names:
            raise InputError(f"--variants: lab {lab.name!r} has no variant {name!r} (it has {', '.join(lab.variant_names)})")
    routing = RoutingTable.from_lab(
        lab, variants=variants, tenant_header=opts.get("tenant_header"),
        tenants=dict(parse_assignment(s, "--tenant") for s in opts.get("tenants") or ()),
        routes=dict(parse_assignment(s, "--route") for s in opts.get("routes") or ()),
        shares=dict(parse_share(s) for s in opts.get("weights") or ()),
    )
    engine = select_engine(opts.get("engine") or "auto")
    directory = Path(opts.get("report_dir") or f"gateway-{lab.name}")
    require_writable_dir(directory, "--report")  # before any server starts
    api_key = os.environ.get(lab.server.api_key_env) if lab.server.api_key_env else None
    return asyncio.run(_serve(lab, routing, engine.engine, str(engine), directory, haproxy, opts, api_key))


async def _attach(lab_name: str, opts: dict[str, Any]) -> int:
    from speclab.model.errors import InputError

    controller = await _open({"socket_path": opts["socket_path"]})
    try:
        if controller.state.lab != lab_name:
            raise InputError(f"gateway: the gateway at {opts['socket_path']} serves lab {controller.state.lab!r}, "
                             f"not {lab_name!r}")
        routing, info = await controller.routing(), await controller.info()
    finally:
        await controller.close()
    click.echo(f"gateway: attached to {controller.state.url} (HAProxy {info.get('Version')}, pid {info.get('Pid')}, "
               f"report {controller.state.directory})")
    for line in describe(routing):
        click.echo(line)
    return int(ExitCode.OK)


async def _serve(lab: Any, routing: Any, engine: Any, engine_label: str, directory: Path, haproxy: str,
                 opts: dict[str, Any], api_key: str | None) -> int:
    from speclab.gateway.launch import start_gateway

    click.echo(f"speclab gateway: lab {lab.name} ({', '.join(routing.variants)}); engine: {engine_label}")
    gw = await start_gateway(lab, routing, engine=engine, directory=directory, haproxy=haproxy,
                             port=opts.get("port"), api_key=api_key)
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[int] = loop.create_future()

    def on_signal(exit_code: int) -> None:
        if not stop.done():
            stop.set_result(exit_code)

    loop.add_signal_handler(signal.SIGINT, on_signal, int(ExitCode.INTERRUPTED))
    loop.add_signal_handler(signal.SIGTERM, on_signal, int(ExitCode.OK))
    try:
        state = gw.state
        click.echo(f"gateway: {state.url} -> " + ", ".join(f"{v} {u}" for v, u in state.servers.items()))
        click.echo(f"gateway: HAProxy {state.haproxy_version} pid {state.haproxy_pid}; stats socket {state.socket}")
        for line in describe(routing):
            click.echo(f"gateway: {line}")
        click.echo(f"gateway: files in {gw.files.directory} (haproxy.cfg, maps, gateway-api.yaml, events.jsonl)")
        click.echo(f"gateway: ready; change it with `speclab gateway set|weight|rollback --report {gw.files.directory}`")
        result = await _watch(gw, stop, opts.get("duration"))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await gw.stop()
        click.echo("gateway: stopped HAProxy and the servers")
    return result


async def _watch(gw: Any, stop: asyncio.Future[int], duration: float | None) -> int:
    """Echo every change as it lands in events.jsonl; end on a signal, --duration or HAProxy's exit."""
    deadline = None if duration is None else time.monotonic() + duration
    offset = 0
    warned: set[str] = set()
    while not stop.done():
        with contextlib.suppress(OSError):
            with gw.files.events.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                with contextlib.suppress(ValueError, KeyError):
                    event = Event.from_dict(json.loads(line))
                    click.echo(f"gateway: {time.strftime('%H:%M:%S', time.localtime(event.data['when']))} "
                               f"{event.message.removeprefix('gateway: ')}")
        if gw.haproxy_exited is not None:
            click.echo(f"speclab: error: gateway: haproxy exited with status {gw.haproxy_exited}", err=True)
            return int(ExitCode.INTERNAL_ERROR)
        for name, server in gw.servers.items():
            process = server._process
            if process is not None and process.returncode is not None and name not in warned:
                warned.add(name)
                click.echo(f"gateway: warning: server {name} exited with status {process.returncode}", err=True)
        if deadline is not None and time.monotonic() >= deadline:
            return int(ExitCode.OK)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(stop), 0.25)
    return int(stop.result())
