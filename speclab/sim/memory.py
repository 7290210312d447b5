"""Modelled GPU memory at start-up: weights, activation reserve and the KV cache left over.

As vLLM's start-up profiling finds them: the budget is the device total times
``--gpu-memory-utilization``; what the weights and the activation reserve leave is KV cache,
in 16-token blocks shared by the target and (if any) the draft.
"""

from __future__ import annotations

from .api import MemoryFacts
from .errors import KvCacheTooSmallError, ModelDoesNotFitError
from .hardware import GIB, GpuProfile
from .shapes import ModelShape

BLOCK_SIZE = 16
ACTIVATION_BASE_BYTES = 0.75 * GIB  # CUDA graphs, sampler and allocator slack per GPU
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 2 * 12  # bf16 intermediates per batched token per hidden unit


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
