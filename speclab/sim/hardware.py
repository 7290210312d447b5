"""GPU profiles behind the step-time and memory model: hardware figures and the step constants.

Kept apart from the arithmetic in ``timing.py`` so that a measurement can replace a profile
(``bench/calibrate_gpu.py`` writes one; ``--sim-gpu-profile FILE`` loads it). The bundled
profiles take their step constants from the published vLLM H100 fit (``published_fit.py``); on
the other GPUs those efficiencies and overheads are assumed to carry over, and their bandwidth,
FLOP/s and memory are the datasheet figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

from .published_fit import derive_constants


@dataclass(frozen=True, slots=True)
class GpuProfile:
    name: str
    hbm_bandwidth: float  # bytes/s (datasheet, or measured copy bandwidth in a calibrated profile)
    peak_flops: float  # dense bf16 FLOP/s
    memory_bytes: float  # what CUDA reports as the device total
    interconnect_bandwidth: float  # bytes/s per GPU for all-reduce (NVLink or PCIe)
    allreduce_latency_s: float  # per all-reduce call
    step_overhead_s: float  # scheduler, sampler and host work per engine step
    weight_efficiency: float  # share of hbm_bandwidth a pass achieves streaming its weights
    kv_efficiency: float  # share of hbm_bandwidth attention achieves reading the KV cache
    flops_efficiency: float  # share of peak_flops per batched token; also the compute floor's
    layer_s: float  # fixed cost per target layer per pass (kernel launch gaps)
    draft_pass_s: float  # fixed cost per draft-model pass (proposer bookkeeping, sampling)
    draft_layer_s: float  # fixed cost per draft layer per pass
    eagle_pass_s: float  # fixed cost per EAGLE head pass
    ngram_fraction: float  # n-gram proposal time as a share of the target pass it precedes
    source: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


GB: Final = 1e9
GIB: Final = float(1 << 30)
MIB: Final = float(1 << 20)

H100_SOURCE: Final = ("step constants from the published vLLM v0.10.1 fit of Llama-3.1-8B on one H100 "
                      "(SpecDecode-Bench, arXiv 2601.11580)")
ASSUMED_SOURCE: Final = "datasheet bandwidth and FLOP/s; step efficiencies and overheads assumed equal to H100's fit"


def _profile(name: str, bandwidth: float, flops: float, memory_mib: int, interconnect: float,
             calibrated_on: tuple[float, float], source: str) -> GpuProfile:
    constants = derive_constants(*calibrated_on)
    return GpuProfile(name, bandwidth, flops, memory_mib * MIB, interconnect, 6e-6, **asdict(constants),
                      source=source)


_H100: Final = (3.35e12, 990e12)
# Memory is what CUDA reports as the device total (nvidia-smi's MiB figure), which is what vLLM
# multiplies by --gpu-memory-utilization; the marketing "80 GB" is neither 80 GiB nor 80e9 bytes.
GPU_PROFILES: Final[dict[str, GpuProfile]] = {
    "H100": _profile("H100", *_H100, 81559, 450 * GB, _H100, H100_SOURCE),
    "H200": _profile("H200", 4.8e12, 990e12, 143771, 450 * GB, _H100, ASSUMED_SOURCE),
    "A100": _profile("A100", 2.0e12, 312e12, 81920, 300 * GB, _H100, ASSUMED_SOURCE),
    "L4": _profile("L4", 0.3e12, 121e12, 23034, 32 * GB, _H100, ASSUMED_SOURCE),
}
GPU_ALIASES: Final[dict[str, str]] = {
    "h100": "H100", "h100-sxm": "H100", "h200": "H200",
    "a100": "A100", "a100-80gb": "A100", "a100_80gb": "A100", "l4": "L4",
}


def gpu_profile(name: str) -> GpuProfile:
    """The profile for a GPU name (case-insensitive); KeyError names the known ones."""
    key = name if name in GPU_PROFILES else GPU_ALIASES.get(name.lower(), "")
    if key not in GPU_PROFILES:
        raise KeyError(f"unknown GPU profile {name!r}; known: {', '.join(GPU_PROFILES)}")
    return GPU_PROFILES[key]
