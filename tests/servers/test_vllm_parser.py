"""Every command line the builder emits, parsed by vLLM 0.33.0's own `vllm serve` parser.

Needs the cached parser venv built by scripts/vllm_parser_env.sh (``$SPECLAB_VLLM_VENV``, default
``~/.cache/speclab/vllm-parser-venv``); skipped with that reason where it is absent, and a
failure instead where ``SPECLAB_REQUIRE_VLLM_PARSER=1`` (as in .ci/run). All command
lines go through one subprocess so the ~7 s import is paid once.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from speclab.model import speculative as sd
from speclab.model.lab import Lab
from speclab.model.vllm_flags import EMITTED, OTHER_KNOWN, REMOVED, SHORT_ALIASES
from speclab.servers.argv import build_argv, speculative_config
from speclab.sim.spec_args import SpecConfigError, spec_config_from_json

from ..vllm_env import missing
from .labdata import DRAFTS, bundled_labs, flag_variety_labs, method_lab, spec_variety_labs
from .parser_env import DATA_FILE, PROBE, render, venv_python

pytestmark = [pytest.mark.vllm_parser, pytest.mark.timeout(300)]  # importing vLLM takes minutes on a busy 2-core host

PYTHON = venv_python()
if not (PYTHON.parent.parent / ".speclab-ready").exists():
    missing(f"vLLM 0.33 parser venv not found at {PYTHON.parent.parent}; build it with scripts/vllm_parser_env.sh",
            module=True)


def _probe(mode: str, payload: Any = None) -> Any:
    out = subprocess.run(
        [str(PYTHON), str(PROBE), mode],
        input=json.dumps(payload) if payload is not None else "",
        capture_output=True, text=True, timeout=280, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _all_commands() -> list[tuple[str, Lab, str]]:
    labs = [*bundled_labs(), *(method_lab(m) for m in sorted(DRAFTS)), *flag_variety_labs(), *spec_variety_labs()]
    return [(f"{lab.name}/{v}", lab, v) for lab in labs for v in lab.variant_names]


@pytest.fixture(scope="module")
def parsed() -> dict[str, Any]:
    commands = _all_commands()
    argvs = [build_argv(lab, v, engine="vllm", port=8000 + i)[2:] for i, (_, lab, v) in enumerate(commands)]
    removed = [["m", flag, "1"] for flag in sorted(REMOVED)]
    results = _probe("parse", argvs + removed)
    return {"commands": commands, "argvs": argvs, "results": results[: len(argvs)], "removed": results[len(argvs) :],
            "tables": _probe("flags")}


def test_every_emitted_argv_parses(parsed: dict[str, Any]) -> None:
    assert len(parsed["commands"]) >= 30
    for (label, lab, variant), argv, result in zip(parsed["commands"], parsed["argvs"], parsed["results"], strict=True):
        assert result["ok"], f"{label}: vLLM 0.33 rejected {argv}: {result['error']}"
        values = result["values"]
        eff = lab.effective(variant)
        assert values["model_tag"] == lab.target.model
        assert values["host"] == "127.0.0.1"
        assert values["speculative_config"] == speculative_config(lab, eff, "vllm"), label
        assert values["enable_per_request_metrics"] is True
        assert values["per_request_spec_decode_metrics"] == "detailed"
        assert values["enable_force_include_usage"] is True
        assert values["enable_chunked_prefill"] == eff.enable_chunked_prefill
        assert values["async_scheduling"] == eff.async_scheduling
        assert values["tensor_parallel_size"] == eff.tensor_parallel_size
        assert values["pipeline_parallel_size"] == eff.pipeline_parallel_size
        assert values["distributed_executor_backend"] == eff.distributed_executor_backend
        if eff.max_num_seqs is not None:
            assert values["max_num_seqs"] == eff.max_num_seqs
        if eff.gpu_memory_utilization is not None:
            assert values["gpu_memory_utilization"] == pytest.approx(eff.gpu_memory_utilization)


def test_removed_flags_are_rejected(parsed: dict[str, Any]) -> None:
    for flag, result in zip(sorted(REMOVED), parsed["removed"], strict=True):
        assert not result["ok"] and result["code"] == 2, flag
        assert "unrecognized arguments" in " ".join(result["error"]), flag


def test_committed_flag_tables_match_the_parser(parsed: dict[str, Any]) -> None:
    tables = parsed["tables"]
    for flag, takes_value in EMITTED.items():
        assert tables["flags"].get(flag) == takes_value, flag
    assert not REMOVED & set(tables["flags"])
    assert {k: v for k, v in tables["flags"].items() if k not in EMITTED and k != "--help"} == {**OTHER_KNOWN}
    assert {k: v for k, v in tables["aliases"].items() if k != "-h"} == SHORT_ALIASES
    # the data file is exactly what the generator writes now (scripts/regen_vllm_flags.py)
    assert DATA_FILE.read_text(encoding="utf-8") == render(tables)


# Configs vLLM 0.33 refuses; the simulator must refuse each in vLLM's own words.
REFUSED: list[dict[str, Any]] = [
    {"rejection_sample_method": "synthetic"},
    {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.8]},
    {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.8, 0.1, 0.0]},
    {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.5, 0.8, 0.1, 0.0]},
    {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 6.0},
    {"synthetic_acceptance_length": 2.0},
    {"rejection_sample_method": "fly", "num_speculative_tokens": 1},
    {"rejection_sample_method": "fly", "fly_window_size": 4},
]
BAD_SCHEDULES: list[Any] = [[[2, 8, 3]], [[1, 8, 3], [8, 16, 2]], [[1, 8, 3, 1]], [[1, 8, -1]], [[5, 1, 2]],
                             [[1, 2]], [[1, "a", 2]]]


@pytest.fixture(scope="module")
def spec_verdicts(parsed: dict[str, Any]) -> dict[str, Any]:
    emitted = [(label, r["values"]["speculative_config"], r["values"].get("max_num_seqs"))
               for (label, _, _), r in zip(parsed["commands"], parsed["results"], strict=True)
               if r["values"].get("speculative_config")]
    refused = [{"method": "draft_model", "model": "m", "num_speculative_tokens": 4, **extra} for extra in REFUSED]
    items = [{"config": cfg, "max_num_seqs": seqs} for _, cfg, seqs in emitted]
    items += [{"config": cfg} for cfg in refused]
    items += [{"config": {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": b}} for b in BAD_SCHEDULES]
    verdicts = _probe("spec", items)
    return {"emitted": list(zip(emitted, verdicts[: len(emitted)], strict=True)),
            "refused": list(zip(refused, verdicts[len(emitted): len(emitted) + len(refused)], strict=True)),
            "schedules": list(zip(BAD_SCHEDULES, verdicts[len(emitted) + len(refused):], strict=True)),
            "fields": _probe("spec_fields")}


def test_every_emitted_speculative_config_passes_vllms_own_validators(spec_verdicts: dict[str, Any]) -> None:
    keys_seen: set[str] = set()
    for (label, cfg, seqs), verdict in spec_verdicts["emitted"]:
        assert verdict["ok"], f"{label}: vLLM 0.33 refused {cfg}: {verdict['error']}"
        keys_seen |= set(cfg)
        ours = spec_config_from_json(cfg)  # the simulator resolves the same settings to the same values
        assert ours.synthetic_acceptance_rates == verdict["synthetic_acceptance_rates"], label
        if cfg.get("rejection_sample_method") == "fly":
            assert ours.fly_window_size == verdict["fly_window_size"], label
        if ours.per_batch_size is not None:
            k = ours.num_speculative_tokens
            assert sd.dense_schedule(ours.per_batch_size, seqs or 256, k) == verdict["dense"], label
    assert {"num_speculative_tokens_per_batch_size", "rejection_sample_method", "draft_sample_method",
            "synthetic_acceptance_rates", "synthetic_acceptance_length", "fly_window_size",
            "suffix_decoding_max_tree_depth"} <= keys_seen


def test_what_vllm_refuses_the_simulator_refuses_in_its_words(spec_verdicts: dict[str, Any]) -> None:
    cases = [*spec_verdicts["refused"],
             *(({"method": "draft_model", "model": "m", "num_speculative_tokens": 4,
                 "num_speculative_tokens_per_batch_size": b}, v) for b, v in spec_verdicts["schedules"])]
    for cfg, verdict in cases:
        assert not verdict["ok"], cfg
        with pytest.raises(SpecConfigError) as info:
            spec_config_from_json(cfg)
        assert str(info.value) in verdict["error"], (cfg, verdict["error"])


def test_the_simulators_key_tables_are_vllms_fields(spec_verdicts: dict[str, Any]) -> None:
    ours = sd.SPEC_KEYS_MODELLED | sd.SPEC_KEYS_NOT_MODELLED | sd.SPEC_KEYS_INTERNAL
    assert ours == set(spec_verdicts["fields"])
