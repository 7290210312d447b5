"""The recommended ``--speculative-config`` through vLLM 0.33's own parser, and its schedule through
vLLM's own validation and the batch-size -> k lookup its scheduler builds.

Needs the cached parser venv (scripts/vllm_parser_env.sh); skipped with that reason where it is
absent, as tests/servers/test_vllm_parser.py is. One subprocess pays vLLM's import once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from speclab.model.lab import load_lab
from speclab.model.speculative import dense_schedule
from speclab.sweep import DraftRules, make_grid, reduce_sweep

from ..vllm_env import missing
from . import synth

pytestmark = [pytest.mark.vllm_parser, pytest.mark.timeout(300)]  # importing vLLM takes minutes on a busy 2-core host

VENV = Path(os.environ.get("SPECLAB_VLLM_VENV") or Path.home() / ".cache/speclab/vllm-parser-venv")
PROBE = Path(__file__).with_name("vllm_schedule_probe.py")
if not (VENV / ".speclab-ready").exists():
    missing(f"vLLM 0.33 parser venv not found at {VENV}; build it with scripts/vllm_parser_env.sh", module=True)


def _probe(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = subprocess.run([str(VENV / "bin/python"), str(PROBE)], input=json.dumps(cases), capture_output=True,
                         text=True, timeout=280, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _recommendations() -> list[tuple[str, dict[str, Any], list[list[int]], int]]:
    """(name, speculative config, schedule, max_num_seqs) for several labs and ladders."""
    out = []
    for lab_name, ladder, batch_cap in (("default", [1, 8, 16, 32, 64], None), ("default", [1, 8, 128, 256], 64.0),
                                        ("ngram", [1, 4, 8, 16], None), ("default", [1, 2], None)):
        lab = load_lab(lab_name)
        grid = make_grid([0, 2, 4], rules=DraftRules(lab.draft.method if lab.draft else None), concurrency=ladder,
                         repeats=2)
        cells = [synth.model_cell(p, grid.slo, jitter=synth.JITTER[p.repeat - 1],
                                  batch=None if batch_cap is None else min(p.load.value, batch_cap)) for p in grid.cells()]
        result = reduce_sweep(grid, cells, lab=lab)
        assert result.speculative_config is not None
        seqs = lab.effective(lab.baseline).max_num_seqs or 256
        out.append((f"{lab_name}@{ladder}", result.speculative_config, result.recommendation.schedule, seqs))
    return out


def test_recommended_speculative_config_parses_and_schedules_as_vllm_does() -> None:
    recs = _recommendations()
    assert any("num_speculative_tokens_per_batch_size" in c for _, c, _, _ in recs)
    assert any("num_speculative_tokens_per_batch_size" not in c for _, c, _, _ in recs)  # one range: a fixed k
    cases = [{"argv": ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", str(seqs), "--speculative-config",
                       json.dumps(config)], "max_batch_size": seqs} for _, config, _, seqs in recs]
    bad = {"method": "draft_model", "model": "m", "num_speculative_tokens": 4,
           "num_speculative_tokens_per_batch_size": [[2, 8, 4]]}
    cases.append({"argv": ["m", "--speculative-config", json.dumps(bad)], "max_batch_size": 8})
    results = _probe(cases)
    for (name, config, schedule, seqs), result in zip(recs, results, strict=False):
        assert result["ok"], f"{name}: vLLM 0.33 refused {config}: {result.get('error')}"
        assert result["speculative_config"] == config, name
        if "num_speculative_tokens_per_batch_size" in config:
            assert result["normalized"] == schedule, name
            k = config["num_speculative_tokens"]
            assert result["dense"] == dense_schedule([tuple(e) for e in schedule], seqs, k), name
            assert max(e[2] for e in schedule) == k
    assert not results[-1]["ok"] and "start at 1" in results[-1]["error"]  # the probe does catch a bad one
