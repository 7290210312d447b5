"""The engine on the modelled clock: speculation's win at low load and its erosion, memory, start-up."""

from __future__ import annotations

import pytest

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.closed_loop import run_closed_loop
from speclab.sim.errors import ModelDoesNotFitError, SimStartupError, UnknownModelError

from .helpers import bundled_items, run_prompts

DRAFT = SpecConfig("draft_model", 4, "sim-1b")


def _workload(copies: int) -> list[tuple[str, list[dict[str, str]], SamplingParams]]:
    base = [item for item in bundled_items() if not item[0].startswith("factual")]
    items = []
    for c in range(copies):
        for rid, messages, _ in base:
            items.append((f"{rid}-{c}", messages, SamplingParams(max_tokens=64, temperature=0)))
    return items


def test_a_good_draft_wins_with_one_request_in_flight_and_a_weak_one_loses() -> None:
    items = _workload(1)[::3]
    base = run_prompts(EngineConfig("sim-8b", max_num_seqs=1), items)
    spec = run_prompts(EngineConfig("sim-8b", max_num_seqs=1, speculative=DRAFT), items)
    weak = run_prompts(EngineConfig("sim-8b", max_num_seqs=1, speculative=SpecConfig("draft_model", 4, "sim-0.5b")),
                       items)
    assert spec.tokens == base.tokens == weak.tokens
    assert spec.clock < base.clock < weak.clock


def _speedups(k: int, concurrencies: tuple[int, ...]) -> list[float]:
    prompts = [(messages, params) for _, messages, params in bundled_items()]
    out = []
    for c in concurrencies:
        n = max(4 * c, len(prompts))
        base = run_closed_loop(EngineConfig("sim-8b", max_num_seqs=64), prompts, c, n)
        spec = run_closed_loop(EngineConfig("sim-8b", max_num_seqs=64, speculative=SpecConfig("draft_model", k, "sim-1b")),
                               prompts, c, n)
        out.append(base.mean_tpot_s / spec.mean_tpot_s)
    return out


def test_tpot_speedup_is_modest_at_one_in_flight_and_k4_stops_paying_under_load() -> None:
    """The default lab's pair under the fit's timing: verification and drafts cost what vLLM's do."""
    one, eight, sixty_four = _speedups(4, (1, 8, 64))
    assert 1.0 < one < 1.6
    assert one > eight > sixty_four
    assert sixty_four < 1.0  # the crossover: k=4 no longer pays at 64 in flight
    k2_one, k2_sixty_four = _speedups(2, (1, 64))
    assert k2_one > one and k2_one > 1.1 and k2_sixty_four < k2_one


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
    with pytest.raises(SimStartupError, match="'dflash' is not modelled"):
        run_prompts(EngineConfig("sim-8b", speculative=SpecConfig("dflash", 3)), [])
    with pytest.raises(UnknownModelError, match="Unknown model None for the speculative draft"):
        run_prompts(EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 3)), [])
    with pytest.raises(SimStartupError, match="max_num_batched_tokens"):
        run_prompts(EngineConfig("sim-8b", enable_chunked_prefill=False, max_num_batched_tokens=512), [])
    with pytest.raises(SimStartupError, match="unknown GPU"):
        run_prompts(EngineConfig("sim-8b", gpu="TPU"), [])
