"""Start-up and failure log lines in vLLM 0.33's shape, so one parser reads vLLM and the simulator.

Every line goes to stdout (flushed) as ``(PROC pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] message``,
``PROC`` being ``APIServer`` or ``EngineCore_DP0`` as in vLLM 0.33. Parse by searching, not by
anchoring at the line start. The exact messages the launcher parses (``{...}`` = a value):

- ``Model loading took {weights:.2f} GiB memory and {secs:.6f} seconds`` (target + draft weights per GPU)
- ``GPU KV cache size: {tokens:,} tokens``  (thousands separated by commas, as vLLM prints)
- ``Maximum concurrency for {max_model_len:,} tokens per request: {x:.2f}x``
- ``speclab-sim: this server is SIMULATED; every number it reports is modelled, not measured on a GPU``
- ``speclab-sim: step times from GPU profile {name}: {where its constants come from}``
- ``Starting vLLM API server 0 on http://{host}:{port}``  (host ``0.0.0.0`` when binding all interfaces)
- ``Application startup complete.``  (the server accepts requests from here on)
- ``{flag} is not modelled by the simulator; accepted and ignored``  (WARNING, per flag)
- failures (ERROR), then exit 1:
  - ``torch.OutOfMemoryError: CUDA out of memory. {detail}``  (a model that does not fit)
  - ``ValueError: No available memory for the cache blocks. {detail}`` or
    ``ValueError: To serve at least one request with the models's max seq len ({n}), ...``  (KV cache too small)
  - ``OSError: [Errno 98] Address already in use: ('{host}', {port})``
  - ``ValueError: Unknown model {name!r}; ...`` / ``ValueError: {speculative-config problem}``
  - ``EngineCore encountered a fatal error.`` (the ``crash_after`` fault, just before the process dies)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Final, TextIO

API: Final = "APIServer"
ENGINE: Final = "EngineCore_DP0"

# The vLLM 0.33 source locations each message comes from (file:line tags only).
SRC_API: Final = "api_server.py:1351"
SRC_ARGS: Final = "arg_utils.py:1920"
SRC_LOADER: Final = "gpu_model_runner.py:2653"
SRC_KV: Final = "kv_cache_utils.py:1087"
SRC_KV_CONC: Final = "kv_cache_utils.py:1091"
SRC_CORE: Final = "core.py:708"
SRC_LAUNCHER: Final = "launcher.py:46"
SRC_SIM: Final = "sim.py:1"


def line(level: str, src: str, message: str, *, proc: str = API, now: float | None = None,
         pid: int | None = None) -> str:
    """``pid``: the process the line speaks for (the engine core's), if not this one."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    return f"({proc} pid={pid or os.getpid()}) {level} {stamp} [{src}] {message}"


def emit(level: str, src: str, message: str, *, proc: str = API, stream: TextIO | None = None,
         pid: int | None = None) -> None:
    out = stream if stream is not None else sys.stdout
    out.write(line(level, src, message, proc=proc, pid=pid) + "\n")
    out.flush()


def info(src: str, message: str, *, proc: str = API, pid: int | None = None) -> None:
    emit("INFO", src, message, proc=proc, pid=pid)


def warning(src: str, message: str, *, proc: str = API) -> None:
    emit("WARNING", src, message, proc=proc)


def error(src: str, message: str, *, proc: str = API) -> None:
    emit("ERROR", src, message, proc=proc)


def weights_line(weights_gib: float, seconds: float) -> str:
    return f"Model loading took {weights_gib:.2f} GiB memory and {seconds:.6f} seconds"


def kv_cache_line(tokens: int) -> str:
    return f"GPU KV cache size: {tokens:,} tokens"


def concurrency_line(max_model_len: int, concurrency: float) -> str:
    return f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"


SIMULATED_LINE: Final = (
    "speclab-sim: this server is SIMULATED; every number it reports is modelled, not measured on a GPU"
)


def profile_line(name: str, source: str) -> str:
    return f"speclab-sim: step times from GPU profile {name}: {source}"


def starting_line(host: str, port: int) -> str:
    return f"Starting vLLM API server 0 on http://{host}:{port}"


def not_modelled_line(flag: str) -> str:
    return f"{flag} is not modelled by the simulator; accepted and ignored"


def oom_line(detail: str) -> str:
    return f"torch.OutOfMemoryError: CUDA out of memory. {detail}"


def address_in_use_line(host: str, port: int) -> str:
    return f"OSError: [Errno 98] Address already in use: ('{host}', {port})"
