"""The V1-style scheduler: seats, token budget (1+k per decode), chunked prefill, KV preemption."""

from __future__ import annotations

from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.hardware import GPU_PROFILES
from speclab.sim.memory import ACTIVATION_BASE_BYTES, ACTIVATION_BYTES_PER_TOKEN_HIDDEN
from speclab.sim.shapes import MODEL_SHAPES

from .helpers import add, bundled_items, drain, run_prompts

STORY = [{"role": "user", "content": "Continue the story: Mara was a baker who lived in a quiet fishing village."}]


def test_waiting_queue_grows_past_max_num_seqs() -> None:
    engine = build_engine(EngineConfig("sim-8b", max_num_seqs=4))
    for i in range(10):
        add(engine, str(i), STORY, SamplingParams(max_tokens=8, temperature=0))
    stats = engine.step(0.0).stats
    assert (stats.running, stats.waiting) == (4, 6)
    run = drain(engine)
    assert max(s.running for s in run.stats) <= 4
    assert len(run.finished) == 10


def test_each_decoding_sequence_costs_one_plus_k_tokens() -> None:
    k = 4
    engine = build_engine(EngineConfig("sim-8b", max_num_batched_tokens=64,
                                       speculative=SpecConfig("draft_model", k, "sim-1b")))
    for i in range(2):
        add(engine, str(i), STORY, SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))
    first = engine.step(0.0).stats
    assert first.prompt_tokens > 0 and first.spec_drafts == 0
    second = engine.step(1.0).stats
    assert second.prompt_tokens == 0
    assert second.iteration_tokens == 2 * (1 + k)
    assert second.spec_draft_tokens == 2 * k
    # a budget too small for both: the second sequence gets what is left (1 + fewer drafts)
    tight = build_engine(EngineConfig("sim-8b", max_num_batched_tokens=7,
                                      speculative=SpecConfig("draft_model", k, "sim-1b")))
    for i in range(2):
        add(tight, str(i), [{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=40, temperature=0,
                                                                                ignore_eos=True))
    run = drain(tight)
    assert max(s.iteration_tokens for s in run.stats) <= 7
    assert any(s.iteration_tokens == 7 and s.spec_draft_tokens == 5 for s in run.stats)


def test_chunked_prefill_splits_long_prompts() -> None:
    long_story = [{"role": "user", "content": "Continue the story: " + " ".join(["Rain had fallen for three days."] * 40)}]
    engine = build_engine(EngineConfig("sim-8b", max_num_batched_tokens=64))
    add(engine, "long", long_story, SamplingParams(max_tokens=4, temperature=0))
    prompt_len = len(engine._seqs["long"].tokens)
    assert prompt_len > 200
    run = drain(engine)
    chunks = -(-prompt_len // 64)
    step_tokens = [s.iteration_tokens for s in run.stats]
    assert step_tokens[:chunks] == [64] * (chunks - 1) + [prompt_len - 64 * (chunks - 1)]
    assert step_tokens[chunks:] == [1] * 3  # then one token per decode step
    assert [s.prompt_tokens for s in run.stats][:chunks] == [0] * (chunks - 1) + [prompt_len]


def test_without_chunking_a_prompt_must_fit_whole() -> None:
    story = [{"role": "user", "content": "Continue the story: " + " ".join(["Snow covered the roofs."] * 30)}]
    engine = build_engine(EngineConfig("sim-8b", max_num_batched_tokens=256, max_model_len=256,
                                       enable_chunked_prefill=False))
    add(engine, "a", story, SamplingParams(max_tokens=4, temperature=0))
    add(engine, "b", story, SamplingParams(max_tokens=4, temperature=0))
    n = len(engine._seqs["a"].tokens)
    assert 128 < n < 256
    first = engine.step(0.0).stats
    assert first.prompt_tokens == n and first.waiting == 1


def _utilization_for_kv_tokens(tokens: int) -> float:
    shape, gpu = MODEL_SHAPES["sim-8b"], GPU_PROFILES["H100"]
    activation = ACTIVATION_BASE_BYTES + 8192 * shape.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
    return (shape.weight_bytes + activation + tokens * shape.kv_bytes_per_token) / gpu.memory_bytes


def test_small_kv_cache_preempts_and_recomputes_without_changing_output() -> None:
    items = [(rid, m, SamplingParams(max_tokens=p.max_tokens, temperature=0)) for rid, m, p in bundled_items()[::4]]
    reference = run_prompts(EngineConfig("sim-8b"), items)
    config = EngineConfig("sim-8b", gpu_memory_utilization=_utilization_for_kv_tokens(300), max_model_len=256)
    run = run_prompts(config, items)
    assert run.engine.memory.kv_cache_tokens < 320
    assert sum(s.preemptions for s in run.stats) > 0
    assert max(s.kv_cache_usage for s in run.stats) > 0.8
    assert sum(f.num_preemptions for f in run.finished.values()) > 0
    assert run.tokens == reference.tokens
    # vllm:prompt_tokens counts each prompt once, however often preemption made it recompute
    assert sum(s.prompt_tokens for s in run.stats) == sum(f.prompt_tokens for f in run.finished.values())


def test_abort_frees_the_request() -> None:
    engine = build_engine(EngineConfig("sim-8b"))
    add(engine, "x", STORY, SamplingParams(max_tokens=50, temperature=0))
    engine.step(0.0)
    engine.abort_request("x")
    result = engine.step(0.01)
    assert [(o.request_id, o.finish_reason) for o in result.outputs] == [("x", "abort")]
    assert not engine.has_unfinished()
    assert engine.scheduler.used_blocks == 0
