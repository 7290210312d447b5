"""vLLM 0.33 as a backend: `vllm serve` argv, its flag table, readiness, log lines, series, responses.

The argv is vLLM 0.33 flags only (``FLAGS.emitted``), speculation as one JSON
``--speculative-config`` (k schedule, drafting and rejection methods included), loopback host,
per-request metrics on (spec-decode metrics ``detailed``). :func:`serve_flags` is the part after
the program and model, shared with the simulator backend, which takes vLLM's flags with vLLM's
meaning; a new launch setting (a parallelism size, say) is added there once for both. The API key
never appears in argv: it travels in ``VLLM_API_KEY``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from speclab.model import vllm_flags
from speclab.model.acceptance import per_k_counts, steps_drafting_position
from speclab.model.lab import Effective, Lab
from speclab.model.names import VLLM_PREFIX, CountSource
from speclab.model.records import SpecCounts

from .base import (
    Detection,
    ExitCause,
    FlagTable,
    GpuProbe,
    Launch,
    MemoryLines,
    PromNames,
    Readiness,
    ResponseMetrics,
    Which,
)
from .ids import EngineId

# Per-step drafted and accepted counts ride with every response, so acceptance can be read per k used.
SPEC_DECODE_METRICS = "detailed"
API_KEY_ENV = "VLLM_API_KEY"

FLAGS = FlagTable(emitted=vllm_flags.EMITTED, other_known=vllm_flags.OTHER_KNOWN,
                  aliases=vllm_flags.SHORT_ALIASES, removed=vllm_flags.REMOVED)

# What vLLM 0.33 prints at start-up (the simulator prints the same lines with modelled figures).
MEMORY_LINES = MemoryLines(
    weights_gib=re.compile(r"Model loading took ([\d.]+) GiB"),
    kv_cache_tokens=re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    concurrency=re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
)

# Why a vLLM 0.33 server died, as its log says: (cause, patterns) in priority order; the first
# cause with a matching line wins.
EXIT_CAUSES: tuple[ExitCause, ...] = (
    (
        "CUDA out of memory",
        (
            re.compile(r"CUDA out of memory|OutOfMemoryError"),
            re.compile(r"No available memory for the cache blocks"),
            re.compile(r"is larger than the available KV cache memory|KV cache is needed, which is larger"),
        ),
    ),
    ("unknown argument", (re.compile(r"unrecognized arguments?:?.*"),)),
    ("invalid argument value", (re.compile(r"error: argument \S+: "),)),
    ("port in use", (re.compile(r"Address already in use|\[Errno 98\]"),)),
    (
        "model not found",
        (
            re.compile(r"Unknown model"),
            re.compile(r"Repository Not Found|RepositoryNotFoundError|is not a local folder and is not a valid model identifier"),
            re.compile(r"[Mm]odel .* not found|No such model"),
        ),
    ),
    ("engine crashed", (re.compile(r"EngineCore encountered a fatal error|Engine core initialization failed"),)),
)


def speculative_config(lab: Lab, eff: Effective, *, simulated: bool) -> dict[str, Any] | None:
    """``--speculative-config`` for one variant; on the simulator a draft model is its stand-in."""
    if not eff.speculative or lab.draft is None:
        return None
    d = lab.draft
    config: dict[str, Any] = {"method": d.method}
    draft_model = d.sim_model if simulated and d.method == "draft_model" else d.model
    if draft_model and d.method not in ("ngram", "suffix"):
        config["model"] = draft_model
    config["num_speculative_tokens"] = eff.num_speculative_tokens
    config.update(eff.spec_options)
    if not simulated and d.revision and draft_model:
        config["revision"] = d.revision
    if d.use_heterogeneous_vocab:
        config["use_heterogeneous_vocab"] = True
    if d.method == "ngram":
        if d.prompt_lookup_min is not None:
            config["prompt_lookup_min"] = d.prompt_lookup_min
        if d.prompt_lookup_max is not None:
            config["prompt_lookup_max"] = d.prompt_lookup_max
    return config


def serve_flags(lab: Lab, eff: Effective, *, served_name: str, launch: Launch, simulated: bool) -> list[str]:
    """vLLM 0.33's flags for one variant, after the program and model (both backends emit these)."""
    argv = ["--served-model-name", served_name]
    argv += ["--host", launch.host, "--port", str(launch.port), "--seed", str(eff.seed)]
    argv += ["--tensor-parallel-size", str(eff.tensor_parallel_size)]
    if eff.pipeline_parallel_size > 1:  # stages across the nodes of a Ray cluster (or local GPUs with mp)
        argv += ["--pipeline-parallel-size", str(eff.pipeline_parallel_size)]
    if eff.distributed_executor_backend is not None:
        argv += ["--distributed-executor-backend", eff.distributed_executor_backend]
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
    spec = speculative_config(lab, eff, simulated=simulated)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    argv += ["--enable-per-request-metrics", "--per-request-spec-decode-metrics", SPEC_DECODE_METRICS]
    argv.append("--enable-force-include-usage")
    argv += list(eff.extra_args)
    return argv


def exact_spec(sd: Mapping[str, Any]) -> SpecCounts:
    """The ``speculative_decoding`` block of vLLM's per-request metrics as counts."""
    hist = [int(x) for x in sd.get("acceptance_histogram") or []]
    k = int(sd.get("num_spec_tokens") or max(len(hist) - 1, 0))
    per_step = [int(x) for x in sd.get("per_step_drafted") or []]  # vLLM's "detailed" mode only
    return SpecCounts(
        steps=int(sd.get("num_spec_steps") or 0),
        drafted=int(sd.get("num_draft_tokens") or 0),
        accepted=int(sd.get("num_accepted_draft_tokens") or 0),
        histogram=hist,
        num_spec_tokens=k,
        source=CountSource.EXACT.value,
        drafted_per_position=steps_drafting_position(0, 0, k, hist, per_step)[0] if per_step else [],
        per_k=per_k_counts(sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or []),
    )


def parse_response_metrics(metrics: Mapping[str, Any]) -> ResponseMetrics:
    """vLLM 0.33's ``metrics`` object (``--enable-per-request-metrics``) of a final chunk."""
    sd = metrics.get("speculative_decoding")
    return ResponseMetrics(
        queue_ms=_float(metrics.get("queue_time_ms")),
        prefill_ms=_float(metrics.get("time_to_first_token_ms")),
        decode_ms=_float(metrics.get("generation_time_ms")),
        spec=exact_spec(sd) if isinstance(sd, dict) else None,
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


class VllmBackend:
    """vLLM 0.33.0 on an NVIDIA GPU."""

    id = EngineId.VLLM
    label = "vLLM"
    simulated = False
    flags = FLAGS
    readiness = Readiness(health_path="/health", start_timeout_s=1200.0, answer_timeout_s=600.0,
                          serves_launch_token=False)
    memory_lines = MEMORY_LINES
    exit_causes = EXIT_CAUSES
    prometheus = PromNames()  # speclab's series are vLLM 0.33's names

    def served_model_name(self, lab: Lab) -> str:
        return lab.target.model

    def speculative_config(self, lab: Lab, eff: Effective) -> dict[str, Any] | None:
        return speculative_config(lab, eff, simulated=False)

    def argv(self, lab: Lab, variant: str, launch: Launch) -> list[str]:
        eff = lab.effective(variant)
        argv = ["vllm", "serve", lab.target.model]
        if lab.target.revision:
            argv += ["--revision", lab.target.revision]
        if lab.target.tokenizer:
            argv += ["--tokenizer", lab.target.tokenizer]
        return argv + serve_flags(lab, eff, served_name=self.served_model_name(lab), launch=launch, simulated=False)

    def env(self, lab: Lab, variant: str, *, api_key: str | None = None) -> dict[str, str]:
        eff = lab.effective(variant)
        env = dict(eff.env)
        if eff.gpus:  # none with the Ray backend: the cluster places each server's GPUs
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in eff.gpus)
        if api_key:
            env[API_KEY_ENV] = api_key
        return env

    def parse_response_metrics(self, metrics: Mapping[str, Any]) -> ResponseMetrics:
        return parse_response_metrics(metrics)

    def detect(self, *, which: Which, gpu_probe: GpuProbe) -> Detection:
        vllm = which("vllm")
        gpu = gpu_probe()
        if vllm and gpu:
            return Detection(found=f"vllm at {vllm}, NVIDIA GPU visible ({gpu})")
        missing = " and ".join(part for part, present in (
            ("no `vllm` executable on PATH", vllm), ("no NVIDIA GPU visible", gpu)) if not present)
        return Detection(missing=missing)

    def recognises(self, metrics_text: str) -> bool:
        return VLLM_PREFIX in metrics_text
