"""Process life of ``python -m speclab.sim``: parse flags, bind, build the engine, serve, shut down.

The order follows vLLM's API server: the port is bound before the engine is built (so a busy
port fails fast), the memory figures are logged once the engine exists, and SIGTERM/SIGINT let
in-flight requests finish for a short grace period, abort the rest, and exit 0.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Final, cast

from aiohttp import web

from . import logs
from .api import DEFAULT_MAX_MODEL_LEN, EngineConfig, EngineCore
from .cli import ServerArgs, SpecConfigError, parse_args
from .engine_client import EngineClient, InProcessClient
from .engine_process import EngineProcess
from .hardware import gpu_profile
from .prom import SimMetrics
from .server import SimServer
from .spec_args import not_modelled_keys

EngineFactory = Callable[[EngineConfig], EngineCore]
SHUTDOWN_GRACE_S: Final = 2.0


MULTIPROCESSING_ENV: Final = "VLLM_ENABLE_V1_MULTIPROCESSING"  # vLLM's switch: "0" keeps the core in-process


def _start_engine(config: EngineConfig, factory: EngineFactory | None) -> EngineClient:
    """The engine core for ``config``: in a process of its own unless a factory is given or
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` asks for it in this one."""
    if factory is not None:
        return InProcessClient(factory(config))
    if os.environ.get(MULTIPROCESSING_ENV, "1") == "0":
        from .engine import build_engine

        return InProcessClient(cast(EngineFactory, build_engine)(config))
    return EngineProcess.start(config)


def _error_kind(exc: BaseException) -> str:
    """Classify an engine start-up failure by its class names (the engine's SimStartupError tree)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "KvCacheTooSmallError" in names:
        return "kv_cache"
    if "ModelDoesNotFitError" in names:
        return "oom"
    if "UnknownModelError" in names:
        return "unknown_model"
    if "SimStartupError" in names:
        return "startup"
    return "internal"


def _bind(host: str | None, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "", port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _log_engine_facts(engine: EngineClient, max_model_len: int, seconds: float) -> None:
    """As vLLM's workers log them: weights and KV memory per GPU, KV tokens and concurrency per engine."""
    mem = engine.memory
    per_gpu = max(mem.num_gpus, 1)
    logs.info(logs.SRC_LOADER, logs.weights_line((mem.weights_gib + mem.draft_weights_gib) / per_gpu, seconds),
              proc=logs.ENGINE, pid=engine.pid)
    logs.info("gpu_worker.py:436", f"Available KV cache memory: {mem.kv_cache_gib / per_gpu:.2f} GiB",
              proc=logs.ENGINE, pid=engine.pid)
    logs.info(logs.SRC_KV, logs.kv_cache_line(mem.kv_cache_tokens), proc=logs.ENGINE, pid=engine.pid)
    logs.info(logs.SRC_KV_CONC, logs.concurrency_line(max_model_len, mem.max_concurrency), proc=logs.ENGINE,
              pid=engine.pid)
    logs.warning(logs.SRC_SIM, logs.SIMULATED_LINE)
    profile = engine.config.gpu_profile or gpu_profile(engine.config.gpu)
    logs.info(logs.SRC_SIM, logs.profile_line(profile.name, profile.source))


def main(argv: list[str], engine_factory: EngineFactory | None = None) -> int:
    """Run the server; returns the process exit code (argparse itself exits 2 on bad flags)."""
    try:
        args = parse_args(argv)
    except SpecConfigError as exc:
        logs.error(logs.SRC_ARGS, f"ValueError: {exc}")
        return 1
    for flag in args.not_modelled:
        logs.warning(logs.SRC_ARGS, logs.not_modelled_line(flag))
    for line in not_modelled_keys(args.engine.speculative) if args.engine.speculative else []:
        logs.warning(logs.SRC_ARGS, line)
    logs.info(logs.SRC_API, "vLLM API server version 0.33.0 (speclab-sim)")
    if args.time_scale != 1.0:
        logs.info(logs.SRC_SIM, f"time scale {args.time_scale:g}: one modelled second lasts {args.time_scale:g} "
                  "wall seconds; every reported time is modelled")
    host_shown = args.host or "0.0.0.0"
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            logs.error(logs.SRC_API, logs.address_in_use_line(host_shown, args.port))
        else:
            logs.error(logs.SRC_API, f"OSError: [Errno {exc.errno}] {exc.strerror}: ('{host_shown}', {args.port})")
        return 1
    started = time.perf_counter()
    try:
        engine = _start_engine(args.engine, engine_factory)
    except KeyboardInterrupt:
        sock.close()
        logs.error(logs.SRC_CORE, "interrupted while the engine core was starting", proc=logs.ENGINE)
        return 130
    except Exception as exc:
        sock.close()
        kind = _error_kind(exc)
        if kind == "oom":
            logs.error(logs.SRC_CORE, logs.oom_line(str(exc)), proc=logs.ENGINE)
        elif kind == "internal":
            logs.error(logs.SRC_CORE, f"{type(exc).__name__}: {exc}", proc=logs.ENGINE)
        else:
            logs.error(logs.SRC_CORE, f"ValueError: {exc}", proc=logs.ENGINE)
        logs.error(logs.SRC_CORE, "RuntimeError: Engine core initialization failed. See root cause above. "
                   "Failed core proc(s): {}", proc=logs.ENGINE)
        return 1
    max_model_len = args.engine.max_model_len or DEFAULT_MAX_MODEL_LEN
    _log_engine_facts(engine, max_model_len, time.perf_counter() - started)
    for note in engine.notes:
        logs.warning(logs.SRC_SIM, note)
    port = sock.getsockname()[1]
    try:
        import uvloop

        runner_fn: Callable[..., int] = uvloop.run
    except ImportError:
        runner_fn = asyncio.run
    try:
        return runner_fn(_serve(args, engine, max_model_len, sock, host_shown, port))
    finally:
        engine.close()


def _metrics(args: ServerArgs, engine: EngineClient, max_model_len: int) -> SimMetrics:
    spec = args.engine.speculative
    mem = engine.memory
    cache_info = {
        "block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "False",
        "gpu_memory_utilization": str(args.engine.gpu_memory_utilization),
        "num_gpu_blocks": str(mem.kv_cache_tokens // 16), "num_cpu_blocks": "0",
    }
    return SimMetrics(args.model_name, num_spec_tokens=spec.num_speculative_tokens if spec else None,
                      max_model_len=max_model_len, cache_info=cache_info, time_scale=args.time_scale)


async def _serve(args: ServerArgs, engine: EngineClient, max_model_len: int, sock: socket.socket,
                 host_shown: str, port: int) -> int:
    server = SimServer(args, engine, max_model_len, _metrics(args, engine, max_model_len))
    loop_task = asyncio.create_task(server.loop.run())
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True,
                           shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    site = web.SockSite(runner, sock, shutdown_timeout=SHUTDOWN_GRACE_S)
    # The imported modules (and an in-process engine's tables) live as long as the process: frozen,
    # the collector's full passes (on the loop that keeps the modelled clock) skip them (about 4% of
    # a step's CPU at 32 in flight, with the engine in this process).
    gc.collect()
    gc.freeze()
    logs.info(logs.SRC_API, logs.starting_line(host_shown, port))
    await site.start()
    logs.info(logs.SRC_LAUNCHER, "Application startup complete.")
    stop = asyncio.Event()
    aloop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        aloop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logs.info(logs.SRC_LAUNCHER, "Shutting down FastAPI HTTP server.")
    await site.stop()
    deadline = time.monotonic() + SHUTDOWN_GRACE_S
    while server.loop.in_flight and time.monotonic() < deadline and server.loop.dead is None:
        await asyncio.sleep(0.02)
    server.loop.abort_all()
    await asyncio.sleep(0.05)
    await runner.cleanup()
    server.loop.stop()
    await loop_task
    engine.close()
    return 0
