"""A stand-in for ``python -m speclab.sim`` in lifecycle tests: same flags, log lines and endpoints.

It also starts "engine" subprocesses the way vLLM does (one in its process group and, with
``STANDIN_ESCAPE=1``, one that leaves it with setsid), writing their pids to ``$STANDIN_PIDS``,
so tests can prove that no descendant survives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from aiohttp import web

from speclab.model.vllm_flags import EMITTED, OTHER_KNOWN

PREFIX = f"(APIServer pid={os.getpid()}) INFO 01-01 00:00:00 [api_server.py:1] "


def log(message: str) -> None:
    print(PREFIX + message, flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="standin_sim")
    p.add_argument("model")
    for flag, takes in {**EMITTED, **OTHER_KNOWN}.items():
        if takes:
            p.add_argument(flag, nargs="+" if flag == "--served-model-name" else None)
        else:
            p.add_argument(flag, action="store_true")
    p.add_argument("--sim-gpu")
    p.add_argument("--sim-fault", action="append")
    return p.parse_args(argv)


def spawn_engines() -> list[int]:
    sleeper = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]
    procs = [subprocess.Popen(sleeper)]
    if os.environ.get("STANDIN_ESCAPE") == "1":
        procs.append(subprocess.Popen(sleeper, start_new_session=True))
    return [p.pid for p in procs]


async def serve(ns: argparse.Namespace) -> None:
    name = (ns.served_model_name or [ns.model])[0]
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"}]})

    async def settings(_: web.Request) -> web.Response:
        return web.json_response({"speculative_config": ns.speculative_config, "max_num_seqs": ns.max_num_seqs})

    async def version(_: web.Request) -> web.Response:
        token = os.environ.get("SPECLAB_LAUNCH_TOKEN")
        return web.json_response({"version": "0.33.0", **({"launch_token": token} if token else {})})

    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/standin/settings", settings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, ns.host, int(ns.port))
    try:
        await site.start()
    except OSError:
        print(f"(APIServer pid={os.getpid()}) ERROR 01-01 00:00:00 [launcher.py:46] OSError: [Errno 98] Address already in use: ('{ns.host}', {ns.port})", flush=True)
        sys.exit(1)
    log(f"Starting vLLM API server 0 on http://{ns.host}:{ns.port}")
    await asyncio.Event().wait()


def main() -> None:
    ns = parse(sys.argv[1:])
    if not ns.model.startswith("sim-"):
        print(f"ValueError: Unknown model {ns.model!r}", flush=True)
        sys.exit(1)
    pids = spawn_engines()
    if os.environ.get("STANDIN_PIDS"):
        with open(os.environ["STANDIN_PIDS"], "w") as fh:
            json.dump([os.getpid(), *pids], fh)
    spec = json.loads(ns.speculative_config) if ns.speculative_config else None
    time.sleep(float(os.environ.get("STANDIN_DELAY", "0")))  # a slow model load
    log(f"Model loading took {15.0 + (2.3 if spec else 0.0):.2f} GiB memory and 0.5 seconds")
    log(f"GPU KV cache size: {400000 if not spec else 350000:,} tokens")
    log(f"Maximum concurrency for {int(ns.max_model_len or 4096):,} tokens per request: {97.66 if not spec else 85.45:.2f}x")
    asyncio.run(serve(ns))


if __name__ == "__main__":
    main()
