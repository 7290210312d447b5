"""The embedded simulator (``python -m speclab.sim``) as a backend.

It takes vLLM 0.33's flags with vLLM's meaning (:func:`speclab.servers.backends.vllm.serve_flags`)
and stand-in model names, plus its own ``--sim-*`` flags, so what is measured on a laptop is
launched the same way as on a GPU host. It prints vLLM's start-up lines, serves vLLM's series and
response shapes, and adds what vLLM cannot: the launch token on ``/version`` and the
``speclab_sim_*`` health series.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from speclab.model.lab import Effective, Lab

from . import vllm
from .base import Detection, GpuProbe, Launch, Readiness, ResponseMetrics, Which
from .ids import EngineId

SIM_SERIES_PREFIX = "speclab_sim_"


class SimBackend:
    """speclab's vLLM-compatible simulator, started as a Python module."""

    id = EngineId.SIM
    label = "vLLM-compatible simulator"
    simulated = True
    flags = vllm.FLAGS  # the simulator's parser is built from vLLM 0.33's table
    readiness = Readiness(health_path="/health", start_timeout_s=60.0, answer_timeout_s=60.0,
                          serves_launch_token=True)
    memory_lines = vllm.MEMORY_LINES
    exit_causes = vllm.EXIT_CAUSES  # vLLM's words for the same failures
    prometheus = vllm.VllmBackend.prometheus

    def served_model_name(self, lab: Lab) -> str:
        return lab.target.sim_model

    def speculative_config(self, lab: Lab, eff: Effective) -> dict[str, Any] | None:
        return vllm.speculative_config(lab, eff, simulated=True)

    def argv(self, lab: Lab, variant: str, launch: Launch) -> list[str]:
        eff = lab.effective(variant)
        argv = [launch.python, "-m", launch.module, lab.target.sim_model]
        argv += vllm.serve_flags(lab, eff, served_name=self.served_model_name(lab), launch=launch, simulated=True)
        argv += ["--sim-gpu", eff.sim_gpu]
        if launch.time_scale != 1.0:
            argv += ["--sim-time-scale", f"{launch.time_scale:g}"]
        for fault in eff.sim_faults:
            argv += ["--sim-fault", fault]
        return argv

    def env(self, lab: Lab, variant: str, *, api_key: str | None = None) -> dict[str, str]:
        env = dict(lab.effective(variant).env)
        if api_key:
            env[vllm.API_KEY_ENV] = api_key
        return env

    def parse_response_metrics(self, metrics: Mapping[str, Any]) -> ResponseMetrics:
        return vllm.parse_response_metrics(metrics)

    def detect(self, *, which: Which, gpu_probe: GpuProbe) -> Detection:
        return Detection(found="the simulator runs anywhere speclab runs")

    def recognises(self, metrics_text: str) -> bool:
        return SIM_SERIES_PREFIX in metrics_text
