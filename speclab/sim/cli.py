"""The simulator's command line: vLLM 0.33's ``vllm serve`` flags plus ``--sim-*`` ones.

Parsing is argparse, like vLLM's, so an unknown or removed flag exits 2 with "unrecognized
arguments". Flags vLLM knows but the simulator does not model are accepted and reported by name,
so the server can warn about each. ``--speculative-config`` is read by ``spec_args`` the way
vLLM's ``SpeculativeConfig`` reads it.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any, Final

from speclab.model.vllm_flags import OTHER_KNOWN, SHORT_ALIASES

from .api import EngineConfig, SpecConfig
from .gpu_profile_file import GpuProfileFileError, load_gpu_profile
from .hardware import GIB, GPU_PROFILES, GpuProfile
from .shapes import vocab_mismatch, vocab_mismatch_message
from .spec_args import SpecConfigError, spec_config_from_json
from .wire_faults import FaultSpecError, split_faults

__all__ = ["ServerArgs", "SpecConfigError", "build_parser", "parse_args", "spec_config_from_json"]


@dataclass(slots=True)
class ServerArgs:
    engine: EngineConfig
    host: str | None = None
    port: int = 8000
    served_model_names: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    enable_per_request_metrics: bool = False
    per_request_spec_decode_metrics: str = "none"
    enable_force_include_usage: bool = False
    stream_interval: int = 1
    wire_faults: dict[str, float] = field(default_factory=dict)
    not_modelled: list[str] = field(default_factory=list)
    time_scale: float = 1.0  # wall seconds per modelled second (--sim-time-scale)

    @property
    def model_name(self) -> str:
        return self.served_model_names[0] if self.served_model_names else self.engine.model


def _human_int(text: str) -> int:
    """vLLM's human-readable ints: ``1k`` = 1000, ``1K`` = 1024, ``25.6k``; ``-1``/``auto`` = -1."""
    text = text.strip()
    if text.lower() == "auto":
        return -1
    factors = {"k": 1000, "m": 1000**2, "g": 1000**3, "K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in factors:
        try:
            return int(float(text[:-1]) * factors[text[-1]])
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid human-readable integer: {text!r}") from None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def _positive_int(text: str) -> int:
    value = _human_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _time_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}") from None
    if not value >= 1.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 1 (1: modelled time runs at wall speed), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m speclab.sim",
        description="speclab's simulated vLLM 0.33 server (numbers are modelled, not measured on a GPU)",
        allow_abbrev=False,
    )
    p.add_argument("model_tag", nargs="?", help="sim-0.5b | sim-1b | sim-8b | sim-70b | sim-72b")
    p.add_argument("--model", dest="model_opt")
    p.add_argument("--speculative-config", "-sc", type=json.loads, default=None)
    p.add_argument("--structured-outputs-config", type=json.loads, default=None)
    p.add_argument("--max-num-seqs", type=_positive_int, default=None)
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=None)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    # vLLM 0.33's visible negative form; --no-enable-chunked-prefill is its hidden alias.
    p.add_argument("--disable-chunked-prefill", dest="enable_chunked_prefill", action="store_false")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--max-model-len", type=_human_int, default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=_positive_int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=_positive_int, default=1)
    # How vLLM places its workers (Ray across nodes, or local processes): no modelled time of its own.
    p.add_argument("--distributed-executor-backend", choices=("ray", "mp", "uni", "external_launcher"), default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--api-key", nargs="+", default=None)
    p.add_argument("--enable-per-request-metrics", action="store_true")
    p.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"), default="none")
    p.add_argument("--enable-force-include-usage", action="store_true")
    p.add_argument("--stream-interval", type=_positive_int, default=1)
    p.add_argument("--revision", default=None)
    p.add_argument("--tokenizer", default=None)
    sim = p.add_argument_group("simulator")
    sim.add_argument("--sim-gpu", choices=tuple(GPU_PROFILES), default="H100")
    sim.add_argument("--sim-gpu-profile", default=None, metavar="FILE",
                     help="a GPU profile file (bench/calibrate_gpu.py writes one); overrides --sim-gpu")
    sim.add_argument("--sim-fault", action="append", default=[], metavar="NAME[=VALUE]")
    sim.add_argument("--sim-time-scale", type=_time_scale, default=1.0, metavar="S",
                     help="run the modelled clock S times slower than wall time (S >= 1), for a host "
                          "too small for the load; every figure the server reports stays modelled")
    known = p.add_argument_group("known to vLLM 0.33, not modelled (accepted with a warning)")
    aliases: dict[str, list[str]] = {}
    for short, long in SHORT_ALIASES.items():
        aliases.setdefault(long, []).append(short)
    for flag, takes_value in OTHER_KNOWN.items():
        strings = [s for s in (flag, *aliases.get(flag, [])) if s not in p._option_string_actions]
        if flag not in strings:
            continue
        dest = _not_modelled_dest(flag)
        if takes_value:
            known.add_argument(*strings, dest=dest, default=None, metavar="VALUE")
        else:
            known.add_argument(*strings, dest=dest, action="store_const", const=True, default=None)
    return p


def _not_modelled_dest(flag: str) -> str:
    return "nm_" + flag.lstrip("-").replace("-", "_")


def check_vocab(model: str, spec: SpecConfig | None) -> None:
    """Refuse a draft_model pair whose real models' vocab sizes differ, as vLLM 0.33 does."""
    if spec is None or spec.method != "draft_model" or not spec.model or spec.use_heterogeneous_vocab:
        return
    sizes = vocab_mismatch(model, spec.model)
    if sizes is not None:
        raise SpecConfigError(f"1 validation error for SpeculativeConfig\n  Value error, {vocab_mismatch_message(*sizes)}")


def defaults_for_gpu(gpu: str | GpuProfile) -> tuple[int, int]:
    """vLLM 0.33's server defaults (max_num_seqs, max_num_batched_tokens) by GPU memory."""
    profile = GPU_PROFILES[gpu] if isinstance(gpu, str) else gpu
    mem = profile.memory_bytes / GIB
    if profile.name == "A100" or mem < 70:
        return 256, 2048
    if mem >= 160:
        return 1024, 16384
    return 1024, 8192


_STRUCTURED_KEYS: Final = ("backend", "disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                            "reasoning_parser", "reasoning_parser_plugin", "enable_in_reasoning")


def _structured_outputs_config(parser: argparse.ArgumentParser, value: Any) -> dict[str, Any]:
    """vLLM 0.33's StructuredOutputsConfig: the keys that change a grammar, and those that change nothing here."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        parser.error("argument --structured-outputs-config: expected a JSON object")
    unknown = [k for k in value if k not in _STRUCTURED_KEYS]
    if unknown:
        parser.error(f"argument --structured-outputs-config: unknown key {unknown[0]!r}; "
                     f"StructuredOutputsConfig takes {', '.join(_STRUCTURED_KEYS)}")
    for key in ("disable_any_whitespace", "disable_additional_properties"):
        if not isinstance(value.get(key, False), bool):
            parser.error(f"argument --structured-outputs-config: {key} must be true or false")
    backend = value.get("backend", "auto")
    if not isinstance(backend, str):
        parser.error("argument --structured-outputs-config: backend must be a string")
    return {"structured_backend": backend,
            "disable_any_whitespace": value.get("disable_any_whitespace", False),
            "disable_additional_properties": value.get("disable_additional_properties", False),
            "structured_not_modelled": [k for k in value if k not in ("backend", "disable_any_whitespace",
                                                                      "disable_additional_properties")]}


def parse_args(argv: list[str]) -> ServerArgs:
    """argv -> ServerArgs. argparse problems exit 2; a bad speculative config raises SpecConfigError."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    model = ns.model_tag or ns.model_opt
    if not model:
        parser.error("the following arguments are required: model_tag")
    try:
        engine_faults, wire = split_faults(ns.sim_fault)
    except FaultSpecError as exc:
        parser.error(f"argument --sim-fault: {exc}")
    if not 0.0 < ns.gpu_memory_utilization <= 1.0:
        parser.error(f"argument --gpu-memory-utilization: must be in (0, 1], got {ns.gpu_memory_utilization}")
    if not 0 <= ns.port <= 65535:
        parser.error(f"argument --port: must be in 0..65535, got {ns.port}")
    spec = spec_config_from_json(ns.speculative_config) if ns.speculative_config is not None else None
    check_vocab(model, spec)
    profile: GpuProfile | None = None
    if ns.sim_gpu_profile is not None:
        try:
            profile = load_gpu_profile(ns.sim_gpu_profile)
        except GpuProfileFileError as exc:
            parser.error(f"argument --sim-gpu-profile: {exc}")
    seqs, tokens = defaults_for_gpu(profile or ns.sim_gpu)
    structured = _structured_outputs_config(parser, ns.structured_outputs_config)
    engine = EngineConfig(
        model=model,
        speculative=spec,
        max_num_seqs=ns.max_num_seqs or seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens or tokens,
        enable_chunked_prefill=ns.enable_chunked_prefill,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        max_model_len=None if ns.max_model_len in (None, -1) else ns.max_model_len,
        tensor_parallel_size=ns.tensor_parallel_size,
        pipeline_parallel_size=ns.pipeline_parallel_size,
        seed=ns.seed,
        gpu=profile.name if profile else ns.sim_gpu,
        gpu_profile=profile,
        scheduling_policy=ns.scheduling_policy,
        async_scheduling=ns.async_scheduling,
        faults=engine_faults,
        **structured,
    )
    api_keys = list(ns.api_key or [])
    if not api_keys and os.environ.get("VLLM_API_KEY"):
        api_keys = [os.environ["VLLM_API_KEY"]]
    not_modelled = [flag for flag in OTHER_KNOWN if getattr(ns, _not_modelled_dest(flag), None) is not None]
    if ns.distributed_executor_backend is not None:  # TP x PP is modelled; where vLLM puts the workers is not
        not_modelled.append("--distributed-executor-backend")
    if ns.async_scheduling:  # the step model schedules each step after the previous one has returned
        not_modelled.append("--async-scheduling")
    # The model's tokenizer and its data are the simulator's own, whatever these name.
    not_modelled += [flag for flag, value in (("--tokenizer", ns.tokenizer), ("--revision", ns.revision))
                     if value is not None]
    return ServerArgs(
        engine=engine,
        host=ns.host,
        port=ns.port,
        served_model_names=list(ns.served_model_name or []),
        api_keys=api_keys,
        enable_per_request_metrics=ns.enable_per_request_metrics,
        per_request_spec_decode_metrics=ns.per_request_spec_decode_metrics,
        enable_force_include_usage=ns.enable_force_include_usage,
        stream_interval=ns.stream_interval,
        wire_faults=wire,
        not_modelled=not_modelled,
        time_scale=ns.sim_time_scale,
    )
