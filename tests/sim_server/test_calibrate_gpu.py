"""bench/calibrate_gpu.py on this machine's CPU (a tiny shape): its profile file loads into the simulator.

The script needs torch, which speclab does not depend on; it runs with whichever interpreter can
import torch: this one, else the cached vLLM-parser venv (``$SPECLAB_VLLM_VENV``, default
``~/.cache/speclab/vllm-parser-venv``, torch 2.13 CPU). Skipped only where neither has torch.
The figures themselves are this host's and are not asserted; the file's shape and the constants
it keeps from the published fit are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speclab.sim.cli import parse_args
from speclab.sim.gpu_profile_file import load_gpu_profile
from speclab.sim.hardware import GPU_PROFILES

from .conftest import ROOT

SCRIPT = ROOT / "bench" / "calibrate_gpu.py"


@pytest.fixture(scope="module")
def torch_python() -> str:
    venv = Path(os.environ.get("SPECLAB_VLLM_VENV") or Path.home() / ".cache/speclab/vllm-parser-venv")
    for python in (sys.executable, str(venv / "bin" / "python")):
        if Path(python).exists() and subprocess.run([python, "-c", "import torch"], capture_output=True,
                                                    timeout=60).returncode == 0:
            return python
    pytest.skip(f"no interpreter here can import torch (tried {sys.executable} and {venv}/bin/python)")


def test_a_cpu_calibration_writes_a_profile_the_simulator_loads(tmp_path: Path, torch_python: str) -> None:
    out = tmp_path / "cpu.json"
    r = subprocess.run([torch_python, str(SCRIPT), "--device", "cpu", "--out", str(out), "--repeats", "2"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=100, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rms relative error" in r.stdout and f"wrote {out}" in r.stdout
    profile = load_gpu_profile(out)
    assert profile.name.startswith("cpu ") and "measured by calibrate_gpu.py" in profile.source
    h100 = GPU_PROFILES["H100"]
    for kept in ("step_overhead_s", "draft_pass_s", "eagle_pass_s", "ngram_fraction"):
        assert getattr(profile, kept) == pytest.approx(getattr(h100, kept), rel=1e-9), kept
    raw = json.loads(out.read_text())
    assert raw["measured"]["shape"]["layers"] == 4 and len(raw["measured"]["points"]) == 12
    assert parse_args(["sim-1b", "--sim-gpu-profile", str(out)]).engine.gpu_profile == profile


def test_the_script_refuses_cuda_where_there_is_none(tmp_path: Path, torch_python: str) -> None:
    r = subprocess.run([torch_python, str(SCRIPT), "--device", "cuda", "--out", str(tmp_path / "x.json")],
                       capture_output=True, text=True, timeout=100, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2 and "no CUDA device visible" in r.stderr
    assert not (tmp_path / "x.json").exists()
