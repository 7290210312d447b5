"""`--engine auto|vllm|sim`: vLLM only where a `vllm` executable and an NVIDIA GPU are both present.

``SPECLAB_FAKE_GPU=1`` makes a GPU count as visible: it exists for the fake `vllm` in
tests/servers/fake_vllm, which proves the vLLM launch path on machines without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from speclab.model.errors import InputError

FAKE_GPU_ENV = "SPECLAB_FAKE_GPU"


@dataclass(frozen=True, slots=True)
class EngineChoice:
    engine: Literal["vllm", "sim"]
    reason: str

    @property
    def simulated(self) -> bool:
        return self.engine == "sim"

    def __str__(self) -> str:
        return f"{self.engine}: {self.reason}"


def gpu_visible() -> str | None:
    """How an NVIDIA GPU was found (a short phrase), or None."""
    if os.environ.get(FAKE_GPU_ENV) == "1":
        return f"{FAKE_GPU_ENV}=1"
    if os.path.exists("/dev/nvidia0"):
        return "/dev/nvidia0"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() > 0:
                return "NVML"
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode == 0 and "GPU" in out.stdout:
            return "nvidia-smi"
    return None


def select_engine(
    requested: str = "auto",
    *,
    which: Callable[[str], str | None] = shutil.which,
    gpu_probe: Callable[[], str | None] = gpu_visible,
) -> EngineChoice:
    if requested not in ("auto", "vllm", "sim"):
        raise InputError(f"--engine: expected auto, vllm or sim, got {requested!r}")
    if requested == "sim":
        return EngineChoice("sim", "simulator requested (--engine sim)")
    vllm = which("vllm")
    gpu = gpu_probe()
    if vllm and gpu:
        return EngineChoice("vllm", f"vllm at {vllm}, NVIDIA GPU visible ({gpu})")
    missing = " and ".join(
        part for part, present in (("no `vllm` executable on PATH", vllm), ("no NVIDIA GPU visible", gpu)) if not present
    )
    if requested == "vllm":
        raise InputError(f"--engine vllm: {missing}; use --engine sim or --engine auto")
    return EngineChoice("sim", f"simulated: {missing}")
