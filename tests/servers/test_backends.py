"""The backend registry and protocol: every engine id has one backend, ``--engine`` lists exactly
them, and the seam's answers (names, readiness, detection, response metrics, series renames) are
what the launcher, scraper and client were given before the seam existed."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from speclab.cli.options import engine_option
from speclab.metrics.scraper import MetricsScraper
from speclab.model.errors import InputError
from speclab.model.names import PROM_QUEUE_TIME, PROM_RUNNING, PROM_SPEC_DRAFTS
from speclab.servers.backends import AUTO, EngineId, engine_choices, engine_id, engine_request
from speclab.servers.backends.base import Launch, PromNames
from speclab.servers.backends.registry import BACKENDS, backend, fallback
from speclab.servers.backends.sim import SimBackend
from speclab.servers.backends.vllm import VllmBackend
from speclab.servers.engine import select_engine

from .labdata import bundled_labs


def test_every_engine_id_has_one_backend_and_the_choices_come_from_them() -> None:
    assert list(BACKENDS) == list(EngineId)
    assert all(BACKENDS[e].id is e for e in EngineId)
    assert engine_choices() == [AUTO, "vllm", "sim"]
    assert isinstance(backend("vllm"), VllmBackend) and isinstance(backend(EngineId.SIM), SimBackend)
    assert fallback().simulated and not backend("vllm").simulated


def test_ids_are_the_words_recordings_and_reports_use() -> None:
    assert EngineId.SIM == "sim" and str(EngineId.VLLM) == "vllm" and f"{EngineId.SIM}" == "sim"
    assert json.dumps({"engine": EngineId.VLLM}) == '{"engine": "vllm"}'
    assert engine_request("auto") == AUTO and engine_request("sim") is EngineId.SIM


def test_an_unknown_engine_is_refused_listing_the_choices() -> None:
    with pytest.raises(InputError, match=r"^--engine: expected auto, vllm or sim, got 'sglang'$"):
        engine_id("sglang")
    with pytest.raises(InputError, match="expected auto, vllm or sim"):
        select_engine("tpu")


def test_the_engine_option_hands_the_command_an_engine_id() -> None:
    seen: list[object] = []

    @click.command()
    @engine_option()
    def cmd(engine: object) -> None:
        seen.append(engine)

    runner = CliRunner()
    assert runner.invoke(cmd, ["--engine", "sim"]).exit_code == 0
    assert runner.invoke(cmd, []).exit_code == 0
    bad = runner.invoke(cmd, ["--engine", "tpu"])
    assert bad.exit_code == 2 and "'auto', 'vllm', 'sim'" in bad.output
    assert seen == [EngineId.SIM, AUTO] and type(seen[0]) is EngineId


def test_auto_takes_the_first_real_backend_that_detects_itself_else_the_simulator() -> None:
    found = select_engine("auto", which=lambda name: f"/usr/bin/{name}", gpu_probe=lambda: "NVML")
    assert found.engine is EngineId.VLLM and found.backend is BACKENDS[EngineId.VLLM] and not found.simulated
    fell = select_engine("auto", which=lambda name: None, gpu_probe=lambda: "NVML")
    assert fell.engine is EngineId.SIM and fell.simulated
    assert fell.reason == "simulated: no `vllm` executable on PATH"


def test_readiness_and_identity_evidence_per_backend() -> None:
    vllm, sim = BACKENDS[EngineId.VLLM], BACKENDS[EngineId.SIM]
    assert vllm.readiness.health_path == sim.readiness.health_path == "/health"
    assert (vllm.readiness.start_timeout_s, sim.readiness.start_timeout_s) == (1200.0, 60.0)
    assert (vllm.readiness.answer_timeout_s, sim.readiness.answer_timeout_s) == (600.0, 60.0)
    assert sim.readiness.serves_launch_token and not vllm.readiness.serves_launch_token
    assert sim.recognises("speclab_sim_clock_drift_seconds 0.0\n") and not sim.recognises("vllm:num_requests_running 1\n")


def test_argv_names_and_env_per_backend() -> None:
    lab = bundled_labs()[0]
    name = lab.variant_names[-1]
    launch = Launch(host="127.0.0.1", port=8123, python="/py", module="stand.in")
    vllm_argv = BACKENDS[EngineId.VLLM].argv(lab, name, launch)
    sim_argv = BACKENDS[EngineId.SIM].argv(lab, name, launch)
    assert vllm_argv[:3] == ["vllm", "serve", lab.target.model]
    assert sim_argv[:4] == ["/py", "-m", "stand.in", lab.target.sim_model]
    assert "--sim-gpu" in sim_argv and "--sim-gpu" not in vllm_argv
    assert BACKENDS[EngineId.VLLM].served_model_name(lab) == lab.target.model
    assert BACKENDS[EngineId.SIM].served_model_name(lab) == lab.target.sim_model
    assert "CUDA_VISIBLE_DEVICES" in BACKENDS[EngineId.VLLM].env(lab, name)
    assert "CUDA_VISIBLE_DEVICES" not in BACKENDS[EngineId.SIM].env(lab, name)
    assert BACKENDS[EngineId.SIM].env(lab, name, api_key="k")["VLLM_API_KEY"] == "k"


def test_response_metrics_are_read_into_speclabs_terms() -> None:
    metrics = {"queue_time_ms": 3, "time_to_first_token_ms": 40.5, "generation_time_ms": 200,
               "speculative_decoding": {"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": 4,
                                        "acceptance_histogram": [0, 1, 0, 1], "num_spec_tokens": 3}}
    for engine in EngineId:
        read = BACKENDS[engine].parse_response_metrics(metrics)
        assert (read.queue_ms, read.prefill_ms, read.decode_ms) == (3.0, 40.5, 200.0)
        assert read.spec is not None and (read.spec.steps, read.spec.drafted, read.spec.accepted) == (2, 6, 4)
    plain = BACKENDS[EngineId.VLLM].parse_response_metrics({"queue_time_ms": None})
    assert plain.queue_ms is None and plain.spec is None


def test_a_backend_exposing_other_series_names_is_read_under_speclabs_names() -> None:
    # What a third engine's table would say: its names for speclab's series.
    names = PromNames(exposed={PROM_RUNNING: "other:running", PROM_SPEC_DRAFTS: "other:drafts",
                               PROM_QUEUE_TIME: "other:queue_seconds"})
    assert names.renames() == {"other:running": PROM_RUNNING, "other:drafts": PROM_SPEC_DRAFTS,
                               "other:queue_seconds": PROM_QUEUE_TIME}

    def text(n: float) -> str:
        return "\n".join([
            "# TYPE other:running gauge", f"other:running {3 * n}",
            "# TYPE other:drafts counter", f"other:drafts_total {10 * n}",
            "# TYPE other:queue_seconds histogram",
            f'other:queue_seconds_bucket{{le="0.5"}} {4 * n}', f'other:queue_seconds_bucket{{le="+Inf"}} {5 * n}',
            f"other:queue_seconds_sum {n}", f"other:queue_seconds_count {5 * n}",
        ]) + "\n"

    scraper = MetricsScraper("http://x", "v", names=names)
    scraper.parse(text(1), t=0.0)
    sample = scraper.parse(text(2), t=1.0)
    assert sample.running == 6 and sample.spec_drafts == pytest.approx(10)
    queue = sample.histograms[PROM_QUEUE_TIME]
    assert queue["count"] == pytest.approx(5) and queue["buckets"][0] == (0.5, pytest.approx(4))
    assert PromNames().renames() == {} and BACKENDS[EngineId.VLLM].prometheus.renames() == {}
