"""`--engine auto|vllm|sim`: vLLM only where a `vllm` executable and an NVIDIA GPU are both present.

The choices and what each needs come from the backend registry (:mod:`speclab.servers.backends`).

``SPECLAB_FAKE_GPU=1`` makes a GPU count as visible: it exists for the fake `vllm` in
tests/servers/fake_vllm, which proves the vLLM launch path on machines without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from speclab.model.errors import InputError

from .backends import AUTO, EngineId
from .backends.base import Backend
from .backends.registry import BACKENDS, backend, fallback

FAKE_GPU_ENV = "SPECLAB_FAKE_GPU"


@dataclass(frozen=True, slots=True)
class EngineChoice:
    engine: EngineId
    reason: str

    @property
    def backend(self) -> Backend:
        return BACKENDS[self.engine]

    @property
    def simulated(self) -> bool:
        return self.backend.simulated

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
    requested: str | EngineId = AUTO,
    *,
    which: Callable[[str], str | None] = shutil.which,
    gpu_probe: Callable[[], str | None] = gpu_visible,
) -> EngineChoice:
    """The engine a run launches: the one named, or for ``auto`` the first real backend of the
    registry that detects itself here, else the simulator (the reason says what was missing)."""
    if requested != AUTO:
        chosen = backend(requested)
        if chosen.simulated:
            return EngineChoice(chosen.id, f"simulator requested (--engine {chosen.id})")
        found = chosen.detect(which=which, gpu_probe=gpu_probe)
        if found.found is None:
            raise InputError(f"--engine {chosen.id}: {found.missing}; use --engine {fallback().id} or --engine {AUTO}")
        return EngineChoice(chosen.id, found.found)
    missing: list[str] = []
    for candidate in BACKENDS.values():
        if candidate.simulated:
            continue
        found = candidate.detect(which=which, gpu_probe=gpu_probe)
        if found.found is not None:
            return EngineChoice(candidate.id, found.found)
        missing.append(found.missing or f"{candidate.label} unavailable")
    return EngineChoice(fallback().id, f"simulated: {'; '.join(missing)}")
