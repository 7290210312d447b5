"""Modelled step time and memory from hardware figures (profiles in ``hardware.py``).

A step reads the weights once plus the KV cache of every scheduled sequence and does about
2·params FLOPs per token; it takes the longer of the two at the profile's efficiencies, plus a
fixed overhead. That is why verifying 1+k tokens per sequence is almost free at batch 1 (memory
bound) and costly at batch 256 (compute bound). A draft model adds k sequential forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .api import MemoryFacts
from .errors import KvCacheTooSmallError, ModelDoesNotFitError
from .hardware import GIB, GpuProfile, ModelShape

BLOCK_SIZE = 16
ACTIVATION_BASE_BYTES = 0.75 * GIB  # CUDA graphs, sampler and allocator slack per GPU
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 2 * 12  # bf16 intermediates per batched token per hidden unit


@dataclass(slots=True)
class StepWork:
    """What one engine step computes."""

    tokens: int = 0  # target tokens: prefill chunks + 1+k per decoding sequence
    kv_read_tokens: int = 0  # context tokens whose KV the target's attention reads
    draft_passes: int = 0  # sequential draft forward passes (k for draft_model)
    draft_batch: int = 0  # sequences drafted per pass
    draft_kv_tokens: int = 0  # draft context tokens read per pass
    draft_prefill_tokens: int = 0  # prompt tokens the draft model prefills this step


class StepTimeModel:
    def __init__(self, gpu: GpuProfile, target: ModelShape, draft: ModelShape | None, tp: int) -> None:
        self.gpu, self.target, self.draft, self.tp = gpu, target, draft, tp

    def _pass(self, shape: ModelShape, tokens: int, kv_tokens: int, extra_flop_tokens: int = 0) -> float:
        gpu, tp = self.gpu, self.tp
        read = (shape.weight_bytes + kv_tokens * shape.kv_bytes_per_token) / tp
        flops = 2.0 * shape.num_parameters * (tokens + extra_flop_tokens) / tp
        t = max(read / (gpu.hbm_bandwidth * gpu.eff_bandwidth), flops / (gpu.peak_flops * gpu.eff_flops))
        if tp > 1:
            payload = (tokens + extra_flop_tokens) * shape.hidden_size * 2 * 2 * (tp - 1) / tp
            t += 2 * shape.num_layers * (gpu.allreduce_latency_s + payload / gpu.interconnect_bandwidth)
        return t

    def step_time(self, work: StepWork) -> float:
        if work.tokens == 0 and work.draft_passes == 0:
            return 0.0
        t = self._pass(self.target, work.tokens, work.kv_read_tokens) + self.gpu.step_overhead_s
        if self.draft is not None and (work.draft_passes or work.draft_prefill_tokens):
            passes = max(work.draft_passes, 1)
            for i in range(passes):
                extra = work.draft_prefill_tokens if i == 0 else 0
                batch = work.draft_batch if work.draft_passes else 0
                t += self._pass(self.draft, batch, work.draft_kv_tokens + i * batch, extra)
                t += self.gpu.draft_pass_overhead_s
        return t


def plan_memory(gpu: GpuProfile, name: str, target: ModelShape, draft: ModelShape | None, tp: int,
                utilization: float, max_num_batched_tokens: int, max_model_len: int) -> MemoryFacts:
    """Weights, activation reserve and KV cache as vLLM's start-up profiling would find them."""
    budget = gpu.memory_bytes * utilization
    weights = target.weight_bytes / tp
    draft_weights = (draft.weight_bytes / tp) if draft is not None else 0.0
    if weights + draft_weights > budget:
        need = (weights + draft_weights) / GIB
        raise ModelDoesNotFitError(
            f"CUDA out of memory while loading {name}: the weights need {need:.2f} GiB per GPU but only "
            f"{budget / GIB:.2f} GiB are usable ({gpu.memory_bytes / GIB:.2f} GiB × gpu_memory_utilization "
            f"{utilization}) on {tp} × {gpu.name}; increase --tensor-parallel-size")
    activation = ACTIVATION_BASE_BYTES + max_num_batched_tokens * target.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN / tp
    kv_bytes = (budget - weights - draft_weights - activation) * tp
    if kv_bytes <= 0:
        raise KvCacheTooSmallError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.")
    per_token = target.kv_bytes_per_token + (draft.kv_bytes_per_token if draft is not None else 0)
    kv_tokens = int(kv_bytes // per_token) // BLOCK_SIZE * BLOCK_SIZE
    if kv_tokens < max_model_len:
        raise KvCacheTooSmallError(
            f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({max_model_len * per_token / GIB:.2f} GiB KV cache is needed, which is larger than the available KV "
            f"cache memory ({kv_tokens * per_token / GIB:.2f} GiB). Based on the available memory, the estimated "
            f"maximum model length is {kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
    return MemoryFacts(
        weights_gib=target.weight_bytes / GIB,
        draft_weights_gib=(draft.weight_bytes / GIB) if draft is not None else 0.0,
        kv_cache_gib=kv_tokens * per_token / GIB,
        kv_cache_tokens=kv_tokens,
        max_concurrency=kv_tokens / max_model_len,
        gpu_memory_gib=gpu.memory_bytes / GIB,
        num_gpus=tp,
    )
