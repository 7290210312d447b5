"""GPU profiles and model shapes behind the step-time and memory model.

Kept apart from the arithmetic in ``timing.py`` so that a later calibration on a real GPU can
replace the efficiency figures without touching the model. Shapes are the public configs of the
real models each simulator model stands for (see reference/anchors.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class GpuProfile:
    name: str
    hbm_bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16 FLOP/s
    memory_bytes: float
    interconnect_bandwidth: float  # bytes/s per GPU for all-reduce (NVLink or PCIe)
    eff_bandwidth: float = 0.80  # fraction of HBM bandwidth a decode step achieves
    eff_flops: float = 0.60  # fraction of peak a large GEMM achieves
    step_overhead_s: float = 0.0003  # scheduling, sampling, kernel launches per target step
    draft_pass_overhead_s: float = 0.00015  # launches per draft forward pass
    allreduce_latency_s: float = 6e-6  # per all-reduce call


GB: Final = 1e9
GIB: Final = float(1 << 30)

MIB: Final = float(1 << 20)

# Memory is what CUDA reports as the device total (nvidia-smi's MiB figure), which is what vLLM
# multiplies by --gpu-memory-utilization; the marketing "80 GB" is neither 80 GiB nor 80e9 bytes.
GPU_PROFILES: Final[dict[str, GpuProfile]] = {
    "H100": GpuProfile("H100", 3.35e12, 990e12, 81559 * MIB, 450 * GB),
    "H200": GpuProfile("H200", 4.8e12, 990e12, 143771 * MIB, 450 * GB),
    "A100": GpuProfile("A100", 2.0e12, 312e12, 81920 * MIB, 300 * GB),
    "L4": GpuProfile("L4", 0.3e12, 121e12, 23034 * MIB, 32 * GB),
}
GPU_ALIASES: Final[dict[str, str]] = {
    "h100": "H100", "h100-sxm": "H100", "h200": "H200",
    "a100": "A100", "a100-80gb": "A100", "a100_80gb": "A100", "l4": "L4",
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    stands_for: str
    num_parameters: float
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    bytes_per_param: int = 2  # bf16

    @property
    def weight_bytes(self) -> float:
        return self.num_parameters * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param


MODEL_SHAPES: Final[dict[str, ModelShape]] = {
    "sim-70b": ModelShape("meta-llama/Llama-3.1-70B-Instruct", 70.55e9, 80, 8192, 8, 128, 131072),
    "sim-8b": ModelShape("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 32, 4096, 8, 128, 131072),
    "sim-1b": ModelShape("meta-llama/Llama-3.2-1B-Instruct", 1.24e9, 16, 2048, 8, 64, 131072),
    "sim-1b-misaligned": ModelShape("meta-llama/Llama-3.2-1B-Instruct", 1.24e9, 16, 2048, 8, 64, 131072),
    "sim-0.5b": ModelShape("Qwen/Qwen2.5-0.5B-Instruct", 0.494e9, 24, 896, 2, 64, 32768),
}


def gpu_profile(name: str) -> GpuProfile:
    """The profile for a GPU name (case-insensitive); KeyError names the known ones."""
    key = name if name in GPU_PROFILES else GPU_ALIASES.get(name.lower(), "")
    if key not in GPU_PROFILES:
        raise KeyError(f"unknown GPU profile {name!r}; known: {', '.join(GPU_PROFILES)}")
    return GPU_PROFILES[key]
