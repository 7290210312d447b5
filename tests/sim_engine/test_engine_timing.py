"""Step-time and memory model: calibration, the low-load win and high-load loss, fitting rules."""

from __future__ import annotations

import pytest

from speclab.sim.api import EngineConfig, RequestOutput, SamplingParams, SpecConfig
from speclab.sim.errors import ModelDoesNotFitError, SimStartupError, UnknownModelError
from speclab.sim.hardware import GPU_PROFILES, MODEL_SHAPES
from speclab.sim.timing import StepTimeModel, StepWork

from .helpers import bundled_items, run_prompts

DRAFT = SpecConfig("draft_model", 4, "sim-1b")


def test_llama_8b_batch_one_on_h100_is_about_6_3_ms() -> None:
    model = StepTimeModel(GPU_PROFILES["H100"], MODEL_SHAPES["sim-8b"], None, 1)
    t = model.step_time(StepWork(tokens=1, kv_read_tokens=500))
    assert 0.0060 < t < 0.0066
    h200 = StepTimeModel(GPU_PROFILES["H200"], MODEL_SHAPES["sim-8b"], None, 1)
    assert h200.step_time(StepWork(tokens=1, kv_read_tokens=500)) < t


def test_verify_is_nearly_free_at_batch_one_and_costly_at_batch_256() -> None:
    model = StepTimeModel(GPU_PROFILES["H100"], MODEL_SHAPES["sim-8b"], None, 1)
    one, five = (model.step_time(StepWork(tokens=n, kv_read_tokens=500)) for n in (1, 5))
    assert five / one < 1.02
    b1, b5 = (model.step_time(StepWork(tokens=256 * n, kv_read_tokens=256 * 500)) for n in (1, 5))
    assert b5 / b1 > 2.0


def _workload(copies: int) -> list[tuple[str, list[dict[str, str]], SamplingParams]]:
    base = [item for item in bundled_items() if not item[0].startswith("factual")]
    items = []
    for c in range(copies):
        for rid, messages, _ in base:
            items.append((f"{rid}-{c}", messages, SamplingParams(max_tokens=64, temperature=0)))
    return items


def test_speculation_wins_with_one_request_in_flight() -> None:
    for rid, messages, params in _workload(1)[::5]:
        base = run_prompts(EngineConfig("sim-8b"), [(rid, messages, params)])
        spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT), [(rid, messages, params)])
        assert spec.tokens == base.tokens
        assert spec.clock < base.clock, rid


def _e2e(out: RequestOutput) -> float:
    assert out.times is not None and out.times.last_token is not None
    return out.times.last_token - out.times.queued


def test_speculation_loses_with_hundreds_in_flight() -> None:
    items = _workload(7)[:256]
    base = run_prompts(EngineConfig("sim-8b"), items)
    spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT), items)
    assert max(s.running for s in base.stats) == 256
    tokens = sum(len(t) for t in base.tokens.values())
    assert tokens == sum(len(t) for t in spec.tokens.values())
    assert tokens / spec.clock < tokens / base.clock  # throughput
    e2e_base = sum(_e2e(f) for f in base.finished.values())
    e2e_spec = sum(_e2e(f) for f in spec.finished.values())
    assert e2e_spec > e2e_base


def test_timestamps_are_ordered_on_the_modelled_clock() -> None:
    run = run_prompts(EngineConfig("sim-8b", max_num_seqs=2, speculative=DRAFT), _workload(1)[:6])
    waited = 0
    for out in run.finished.values():
        t = out.times
        assert t is not None and t.scheduled is not None and t.first_token is not None and t.last_token is not None
        assert t.queued <= t.scheduled < t.first_token <= t.last_token <= run.clock
        waited += t.scheduled > 0
    assert waited > 0  # some waited for a seat


def test_sim_70b_needs_more_than_one_80gb_gpu() -> None:
    with pytest.raises(ModelDoesNotFitError, match="CUDA out of memory"):
        run_prompts(EngineConfig("sim-70b"), [])
    two = run_prompts(EngineConfig("sim-70b", tensor_parallel_size=2), []).engine.memory
    assert two.num_gpus == 2 and 125 < two.weights_gib < 135 and two.kv_cache_tokens >= 4096
    four = run_prompts(EngineConfig("sim-70b", tensor_parallel_size=4), []).engine.memory
    assert four.kv_cache_tokens > 5 * two.kv_cache_tokens
    with pytest.raises(ModelDoesNotFitError):  # 141 GB of bf16 weights exceed 0.92 × 141 GB too
        run_prompts(EngineConfig("sim-70b", gpu="H200"), [])
    h200 = run_prompts(EngineConfig("sim-70b", gpu="H200", tensor_parallel_size=2), []).engine.memory
    assert h200.kv_cache_tokens > four.kv_cache_tokens / 2


def test_memory_facts_account_for_the_draft() -> None:
    base = run_prompts(EngineConfig("sim-8b"), []).engine.memory
    spec = run_prompts(EngineConfig("sim-8b", speculative=DRAFT), []).engine.memory
    assert 14 < base.weights_gib < 16 and base.draft_weights_gib == 0
    assert 2 < spec.draft_weights_gib < 2.5
    assert spec.kv_cache_tokens < base.kv_cache_tokens
    assert base.max_concurrency == pytest.approx(base.kv_cache_tokens / 4096)


def test_startup_errors_are_named() -> None:
    with pytest.raises(UnknownModelError):
        run_prompts(EngineConfig("gpt-5"), [])
    with pytest.raises(SimStartupError, match="not modelled"):
        run_prompts(EngineConfig("sim-8b", speculative=SpecConfig("mtp", 3)), [])
    with pytest.raises(UnknownModelError, match="Unknown model None for the speculative draft"):
        run_prompts(EngineConfig("sim-8b", speculative=SpecConfig("eagle3", 3)), [])
    with pytest.raises(SimStartupError, match="max_num_batched_tokens"):
        run_prompts(EngineConfig("sim-8b", enable_chunked_prefill=False, max_num_batched_tokens=512), [])
    with pytest.raises(SimStartupError, match="unknown GPU"):
        run_prompts(EngineConfig("sim-8b", gpu="TPU"), [])
