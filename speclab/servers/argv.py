"""The one place that turns a lab variant into a `vllm serve` (or simulator) command line.

vLLM 0.33 flags only (``speclab.model.vllm_flags.EMITTED``), speculation as one JSON
``--speculative-config`` (k schedule, drafting and rejection methods included), loopback host,
per-request metrics on (spec-decode metrics ``detailed``). The simulator gets the same flags with
the simulator stand-in model names, plus its own ``--sim-*`` flags, so what is measured on a
laptop is launched the same way as on a GPU host. The API key never appears in argv: it travels
in ``VLLM_API_KEY`` (see :func:`server_env`).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Mapping
from typing import Any, Literal

from speclab.model.lab import Effective, Lab, Variant

Engine = Literal["vllm", "sim"]
SIM_MODULE = "speclab.sim"
# Per-step drafted and accepted counts ride with every response, so acceptance can be read per k used.
SPEC_DECODE_METRICS = "detailed"
REDACTED = "***"
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH)", re.IGNORECASE)


def served_model_name(lab: Lab, engine: Engine) -> str:
    """The model name clients send: the real target on vLLM, the stand-in on the simulator."""
    return lab.target.model if engine == "vllm" else lab.target.sim_model


def speculative_config(lab: Lab, eff: Effective, engine: Engine) -> dict[str, Any] | None:
    if not eff.speculative or lab.draft is None:
        return None
    d = lab.draft
    config: dict[str, Any] = {"method": d.method}
    draft_model = d.sim_model if engine == "sim" and d.method == "draft_model" else d.model
    if draft_model and d.method not in ("ngram", "suffix"):
        config["model"] = draft_model
    config["num_speculative_tokens"] = eff.num_speculative_tokens
    config.update(eff.spec_options)
    if engine == "vllm" and d.revision and draft_model:
        config["revision"] = d.revision
    if d.use_heterogeneous_vocab:
        config["use_heterogeneous_vocab"] = True
    if d.method == "ngram":
        if d.prompt_lookup_min is not None:
            config["prompt_lookup_min"] = d.prompt_lookup_min
        if d.prompt_lookup_max is not None:
            config["prompt_lookup_max"] = d.prompt_lookup_max
    return config


def build_argv(
    lab: Lab,
    variant: str | Variant,
    *,
    engine: Engine,
    host: str = "127.0.0.1",
    port: int,
    python: str = sys.executable,
    sim_module: str = SIM_MODULE,
) -> list[str]:
    """The full command for one variant's server; ``sim_module`` exists for stand-ins in tests."""
    name = variant if isinstance(variant, str) else variant.name
    eff = lab.effective(name)
    if engine == "vllm":
        argv = ["vllm", "serve", lab.target.model]
        if lab.target.revision:
            argv += ["--revision", lab.target.revision]
        if lab.target.tokenizer:
            argv += ["--tokenizer", lab.target.tokenizer]
    else:
        argv = [python, "-m", sim_module, lab.target.sim_model]
    argv += ["--served-model-name", served_model_name(lab, engine)]
    argv += ["--host", host, "--port", str(port), "--seed", str(eff.seed)]
    argv += ["--tensor-parallel-size", str(eff.tensor_parallel_size)]
    if eff.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{eff.gpu_memory_utilization:g}"]
    if eff.max_model_len is not None:
        argv += ["--max-model-len", str(eff.max_model_len)]
    if eff.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(eff.max_num_seqs)]
    if eff.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(eff.max_num_batched_tokens)]
    if eff.enable_chunked_prefill is not None:
        argv.append("--enable-chunked-prefill" if eff.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if eff.async_scheduling is not None:
        argv.append("--async-scheduling" if eff.async_scheduling else "--no-async-scheduling")
    if eff.scheduling_policy is not None:
        argv += ["--scheduling-policy", eff.scheduling_policy]
    if eff.stream_interval is not None:
        argv += ["--stream-interval", str(eff.stream_interval)]
    spec = speculative_config(lab, eff, engine)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    argv += ["--enable-per-request-metrics", "--per-request-spec-decode-metrics", SPEC_DECODE_METRICS]
    argv.append("--enable-force-include-usage")
    argv += list(eff.extra_args)
    if engine == "sim":
        argv += ["--sim-gpu", eff.sim_gpu]
        for fault in eff.sim_faults:
            argv += ["--sim-fault", fault]
    return argv


def server_env(lab: Lab, variant: str, *, engine: Engine, api_key: str | None = None) -> dict[str, str]:
    """Environment additions for one server: lab/variant env, CUDA_VISIBLE_DEVICES, VLLM_API_KEY."""
    eff = lab.effective(variant)
    env = dict(eff.env)
    if engine == "vllm":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in eff.gpus)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    return env


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
        argv = build_argv(lab, name, engine="vllm", port=ports[name])
        env = server_env(lab, name, engine="vllm")
        lines.append(_with_key_ref(shell_line(argv, env), key_env))
    if engine == "vllm":
        lines.append(f"# this machine runs the vLLM lines above{f' ({reason})' if reason else ''}")
        return lines
    lines.append(f"# this machine runs the simulator{f' ({reason})' if reason else ''}:")
    for name in lab.variant_names:
        argv = build_argv(lab, name, engine="sim", port=ports[name], python=python)
        env = server_env(lab, name, engine="sim")
        lines.append(_with_key_ref(shell_line(argv, env), key_env))
    return lines


def _with_key_ref(line: str, key_env: dict[str, str]) -> str:
    # The key is shown as a reference to the user's variable, never its value.
    if not key_env:
        return line
    (name, ref), = key_env.items()
    return f'{name}="{ref}" {line}'
