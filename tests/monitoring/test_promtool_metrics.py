"""`promtool check metrics` over a real simulator's /metrics: only vLLM's own naming is flagged.

vLLM 0.33 names its series ``vllm:...``, which promtool's linter flags ("metric names should not
contain ':'"), and declares the histogram ``vllm:iteration_tokens_total``, which it flags as a
non-counter with a ``_total`` suffix. The simulator mirrors both, as it must for the scraper; every
other line of its exposition, its own ``speclab_sim_clock_drift_seconds`` included, passes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from speclab.model import names

from .tools import PROMTOOL, Sim, free_port, http_get, needs_promtool

pytestmark = needs_promtool

COLON = re.compile(r"^(vllm:[a-zA-Z0-9_]+) metric names should not contain ':'$")
VLLM_TOTAL_HISTOGRAM = 'vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix'


def _lint(exposition: str) -> tuple[int, list[str]]:
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc.returncode, [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


@pytest.mark.parametrize("spec", [True, False], ids=["speculative", "plain"])
def test_simulator_exposition_passes_but_for_vllm_names(spec: bool, tmp_path: Path) -> None:
    args = ["sim-8b"]
    if spec:
        args += ["--speculative-config",
                 json.dumps({"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 3})]
    sim = Sim(args, free_port(), tmp_path / "sim.log")
    try:
        sim.traffic("sim-8b", requests=2, max_tokens=8)
        status, exposition = http_get(sim.url + "/metrics")
    finally:
        sim.stop()
    assert status == 200
    code, lines = _lint(exposition)
    other = [line for line in lines if not COLON.match(line) and line != VLLM_TOTAL_HISTOGRAM]
    assert other == []
    flagged = {m.group(1) for line in lines if (m := COLON.match(line))}
    assert names.PROM_SPEC_DRAFTS + "_total" in flagged if spec else names.PROM_RUNNING in flagged
    assert VLLM_TOTAL_HISTOGRAM in lines
    assert not any(names.PROM_SIM_CLOCK_DRIFT in line for line in lines)
    assert code != 0  # promtool does fail the exposition, for vLLM's names alone


def test_promtool_flags_a_bad_name_outside_vllm() -> None:
    """The linter is live: a counter without ``_total`` is caught, so a clean pass above means something."""
    code, lines = _lint("# HELP speclab_things Things.\n# TYPE speclab_things counter\nspeclab_things 1\n")
    assert code != 0 and any("speclab_things" in line for line in lines)
