"""The step-time model against the published vLLM H100 fit, and how it scales (modelled times only)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from speclab.sim import breakeven
from speclab.sim.hardware import GPU_PROFILES
from speclab.sim.published_fit import DRAFT_TO_TARGET_PASS, LLAMA_8B_H100, RATIO_CONTEXT
from speclab.sim.shapes import MODEL_SHAPES, eagle_head
from speclab.sim.timing import StepTimeModel, StepWork

H100 = GPU_PROFILES["H100"]
SIM_8B, SIM_1B = MODEL_SHAPES["sim-8b"], MODEL_SHAPES["sim-1b"]


def _pair(gpu: str = "H100", draft: str | None = "sim-1b", tp: int = 1) -> StepTimeModel:
    return StepTimeModel(GPU_PROFILES[gpu], SIM_8B, MODEL_SHAPES[draft] if draft else None, tp)


@pytest.mark.parametrize("k", [0, 2, 4])
@pytest.mark.parametrize("batch", [1, 8, 16, 32, 64])
def test_verify_steps_match_the_published_fit(batch: int, k: int) -> None:
    model = _pair(draft=None)
    modelled = breakeven.step_seconds(model, batch, 1024, k)
    fit = LLAMA_8B_H100.step(batch * 1024, batch * (1 + k))
    assert modelled / fit == pytest.approx(1.0, abs=0.01)


def test_verification_is_not_free_below_the_knee() -> None:
    model = _pair(draft=None)
    ratio = [breakeven.step_seconds(model, b, 1024, 4) / breakeven.step_seconds(model, b, 1024, 0) for b in (1, 32, 64)]
    assert ratio[0] < 1.02
    assert 1.25 < ratio[1] < 1.35 and 1.44 < ratio[2] < 1.54  # the fit: 1.30 and 1.49


def test_a_1b_draft_pass_costs_the_published_share_of_the_target_pass() -> None:
    model = _pair()
    assert model.draft is not None
    share = model.draft.time(1, RATIO_CONTEXT) / model.target.time(1, RATIO_CONTEXT)
    assert 0.8 < share / DRAFT_TO_TARGET_PASS < 1.25


def test_a_draft_pass_fixed_cost_grows_with_depth_and_weights() -> None:
    deeper = replace(SIM_1B, num_layers=2 * SIM_1B.num_layers)
    shallow = StepTimeModel(H100, SIM_8B, SIM_1B).draft
    deep = StepTimeModel(H100, SIM_8B, deeper).draft
    assert shallow is not None and deep is not None
    assert deep.fixed_s - shallow.fixed_s == pytest.approx(SIM_1B.num_layers * H100.draft_layer_s)
    half = StepTimeModel(H100, SIM_8B, MODEL_SHAPES["sim-0.5b"]).draft
    assert half is not None and half.fixed_s < shallow.fixed_s


def test_k_draft_passes_are_sequential_and_read_the_draft_kv() -> None:
    model = _pair()
    one = model.draft_time(StepWork(draft_passes=1, draft_batch=32, draft_kv_tokens=32 * 1024))
    four = model.draft_time(StepWork(draft_passes=4, draft_batch=32, draft_kv_tokens=32 * 1024))
    assert four == pytest.approx(4 * one, rel=0.01)
    short = model.draft_time(StepWork(draft_passes=4, draft_batch=32, draft_kv_tokens=32 * 64))
    assert four - short == pytest.approx(4 * 32 * (1024 - 64) * SIM_1B.kv_bytes_per_token
                                         / (H100.hbm_bandwidth * H100.kv_efficiency), rel=0.01)


@pytest.mark.parametrize("batch", [1, 8, 32, 64])
def test_an_eagle3_proposal_costs_about_the_published_proposal(batch: int) -> None:
    model = StepTimeModel(H100, SIM_8B, eagle_head(SIM_8B, "eagle3"), head=True)
    modelled = model.draft_time(StepWork(draft_passes=3, draft_batch=batch, draft_kv_tokens=batch * 1024))
    published = LLAMA_8B_H100.eagle_proposal(batch * 1024, batch * 3)
    assert 0.9 < modelled / published < 1.1


def test_ngram_lookup_costs_a_small_share_of_the_verify_pass() -> None:
    model = _pair(draft=None)
    work = breakeven.uniform_work(model, 8, 512, 3, lookup=True)
    plain = model.step_time(replace(work, lookups=0))
    assert model.step_time(work) - plain == pytest.approx(H100.ngram_fraction * model.target_pass(work))


def test_a_long_prefill_is_held_at_the_compute_floor() -> None:
    model = _pair(draft=None)
    work = StepWork(tokens=8192, kv_read_tokens=8192, attn_pairs=8192 * 8193 // 2)
    floor = model.target.floor(work.tokens, work.attn_pairs)
    assert floor > model.target.additive(work.tokens, work.kv_read_tokens)
    assert model.target_pass(work) == pytest.approx(floor)


def test_other_gpus_scale_by_bandwidth_and_flops() -> None:
    h100, h200, a100 = (_pair(g, draft=None).target for g in ("H100", "H200", "A100"))
    assert h200.fixed_s < h100.fixed_s and h200.token_s == pytest.approx(h100.token_s)
    assert a100.token_s / h100.token_s == pytest.approx(990 / 312)
    assert a100.kv_token_s / h100.kv_token_s == pytest.approx(3.35 / 2.0)


def test_tensor_parallel_divides_the_stream_and_adds_all_reduces() -> None:
    big = MODEL_SHAPES["sim-70b"]
    two = StepTimeModel(H100, big, None, 2).target
    four = StepTimeModel(H100, big, None, 4).target
    assert four.time(1, 1024) < two.time(1, 1024)
    assert two.comm(1) > 0 and four.comm(64) > four.comm(1)
    qwen = StepTimeModel(H100, MODEL_SHAPES["sim-72b"], None, 2).target
    assert qwen.fixed_s > two.fixed_s  # 72.7B parameters against 70.6B


def test_break_even_acceptance_rises_with_batch_and_with_k() -> None:
    model = _pair()
    k2 = [breakeven.break_even(model, b, 1024, 2) for b in breakeven.BATCHES]
    k4 = [breakeven.break_even(model, b, 1024, 4) for b in breakeven.BATCHES]
    assert k2 == sorted(k2) and k4 == sorted(k4)
    assert all(b > a for a, b in zip(k2, k4, strict=True))


def test_crossover_where_the_model_puts_it() -> None:
    """At Spec-Bench's draft-model acceptance (2.2) a 1B draft at k=4 never pays on an 8B target:
    the fit's 21 µs per verified token plus four draft passes at 37.5% each cost 2.26 decode steps
    at batch 1. The k=4 crossover reaches 32-96 for acceptance lengths of about 2.47-2.71."""
    model = _pair()
    assert breakeven.crossover(model, 2.2, 1024, 4) == 1
    assert breakeven.crossover(model, 2.2, 1024, 2) is None
    low, high = (breakeven.acceptance_for_crossover(model, b, 1024, 4) for b in (32, 96))
    assert 2.4 < low < high < 2.8
    assert 32 <= (breakeven.crossover(model, (low + high) / 2, 1024, 4) or 0) <= 96
