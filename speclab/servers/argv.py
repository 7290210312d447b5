"""Command lines for a lab's variants, through the engine's backend, and how they are shown.

What each engine's argv holds is its backend's business (:mod:`speclab.servers.backends`: vLLM
0.33 flags only, speculation as one JSON ``--speculative-config``, the simulator with stand-in
names and its ``--sim-*`` flags). This module is the one entry the launcher, ``speclab lab show``
and the tests call, and it redacts secrets for display. The API key never appears in argv: it
travels in ``VLLM_API_KEY`` (see :func:`server_env`).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from speclab.model.lab import Effective, Lab, Variant

from .backends import EngineId
from .backends.base import SIM_MODULE, Launch
from .backends.registry import backend

__all__ = ["SIM_MODULE", "Engine", "build_argv", "redact_argv", "redact_env", "render_show_lines",
           "served_model_name", "server_env", "shell_line", "show_ports", "speculative_config"]

Engine = EngineId
REDACTED = "***"
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH)", re.IGNORECASE)


def served_model_name(lab: Lab, engine: EngineId | str) -> str:
    """The model name clients send: the real target on vLLM, the stand-in on the simulator."""
    return backend(engine).served_model_name(lab)


def speculative_config(lab: Lab, eff: Effective, engine: EngineId | str) -> dict[str, Any] | None:
    """The ``--speculative-config`` the engine gets for the variant ``eff`` belongs to."""
    return backend(engine).speculative_config(lab, eff)


def build_argv(
    lab: Lab,
    variant: str | Variant,
    *,
    engine: EngineId | str,
    host: str = "127.0.0.1",
    port: int,
    python: str = sys.executable,
    sim_module: str = SIM_MODULE,
    time_scale: float = 1.0,
) -> list[str]:
    """The full command for one variant's server; ``sim_module`` exists for stand-ins in tests."""
    name = variant if isinstance(variant, str) else variant.name
    return backend(engine).argv(lab, name, Launch(host=host, port=port, python=python, module=sim_module,
                                                        time_scale=time_scale))


def server_env(lab: Lab, variant: str, *, engine: EngineId | str, api_key: str | None = None) -> dict[str, str]:
    """Environment additions for one server: lab/variant env, CUDA_VISIBLE_DEVICES, VLLM_API_KEY."""
    return backend(engine).env(lab, variant, api_key=api_key)


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if _SECRET_ENV.search(k) else v) for k, v in env.items()}


def shell_line(argv: list[str], env: Mapping[str, str] | None = None) -> str:
    """One shell-quoted line, secrets redacted (argv and env)."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in redact_env(env or {}).items()]
    return " ".join([*prefix, *(shlex.quote(a) for a in redact_argv(argv))])


def show_ports(lab: Lab) -> dict[str, int]:
    base = lab.server.base_port or 8000
    return {name: base + i for i, name in enumerate(lab.variant_names)}


def render_show_lines(lab: Lab, *, engine_available: str, python: str = "python") -> list[str]:
    """`speclab lab show`: a `vllm serve` line per variant, then what would run on this machine.

    ``engine_available`` is the engine `--engine auto` picks here ("vllm" or "sim"), optionally
    followed by ": reason". Comment lines start with "#"; every other line is a runnable command.
    """
    engine, _, reason = engine_available.partition(":")
    engine = engine.strip()
    reason = reason.strip()
    ports = show_ports(lab)
    key_env = {"VLLM_API_KEY": f"${lab.server.api_key_env}"} if lab.server.api_key_env else {}
    lines = [f"# lab {lab.name}: vLLM 0.33 command per variant"]
    for variant in lab.variants:
        if variant.lossy_note:
            lines.append(f"# WARNING {variant.name}: {variant.lossy_note}; the equivalence gate fails it")
    for name in lab.variant_names:
        argv = build_argv(lab, name, engine=EngineId.VLLM, port=ports[name])
        env = server_env(lab, name, engine=EngineId.VLLM)
        lines.append(_with_key_ref(shell_line(argv, env), key_env))
    if engine == "vllm":
        lines.append(f"# this machine runs the vLLM lines above{f' ({reason})' if reason else ''}")
        return lines
    lines.append(f"# this machine runs the simulator{f' ({reason})' if reason else ''}:")
    for name in lab.variant_names:
        argv = build_argv(lab, name, engine=EngineId.SIM, port=ports[name], python=python)
        env = server_env(lab, name, engine=EngineId.SIM)
        lines.append(_with_key_ref(shell_line(argv, env), key_env))
    return lines


def _with_key_ref(line: str, key_env: dict[str, str]) -> str:
    # The key is shown as a reference to the user's variable, never its value.
    if not key_env:
        return line
    (name, ref), = key_env.items()
    return f'{name}="{ref}" {line}'
