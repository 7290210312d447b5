"""vLLM 0.33's knobs in the engine: k per step from the schedule, synthetic rates, FLy, suffix trees,
heads against a separate draft, and acceptance falling with temperature."""

from __future__ import annotations

import numpy as np
import pytest

from speclab.model.speculative import dense_schedule
from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig, SuffixSettings
from speclab.sim.engine import build_engine
from speclab.sim.suffix import GlobalTree, _speculate
from speclab.sim.verify import FlyVerifier, StandardVerifier, top_k_entropy

from .helpers import CLASSES, add, bundled_items, drain, run_prompts

SCHEDULE = [(1, 1, 4), (2, 4, 2), (5, 1024, 0)]


def _acceptance_length(spec: SpecConfig, temperature: float = 0.0, copies: int = 1) -> float:
    items = bundled_items(temperature)
    if temperature > 0:
        items = [(f"{rid}-{c}", m, SamplingParams(max_tokens=p.max_tokens, temperature=temperature, seed=c))
                 for c in range(copies) for rid, m, p in items]
    run = run_prompts(EngineConfig("sim-8b", speculative=spec), items)
    specs = [f.spec for f in run.finished.values() if f.spec is not None]
    return 1.0 + sum(s.accepted for s in specs) / sum(s.steps for s in specs)


def test_the_schedule_sizes_each_steps_drafts_by_the_previous_batch() -> None:
    engine = build_engine(EngineConfig("sim-8b", speculative=SpecConfig("draft_model", 4, "sim-1b",
                                                                          per_batch_size=SCHEDULE)))
    dense = dense_schedule(SCHEDULE, engine.config.max_num_seqs, 4)
    for i, (rid, messages, params) in enumerate(bundled_items()[::8]):
        add(engine, rid, messages, params, at=0.0)
        assert i < 8
    seen: set[int] = set()
    clock, previous = 0.0, 0
    while engine.has_unfinished():
        k = engine.step_k()
        assert k == (4 if previous == 0 else dense[previous])
        result = engine.step(clock)
        clock += result.duration
        stats = result.stats
        if stats.spec_drafts:
            assert stats.spec_draft_tokens <= k * stats.spec_drafts
            seen.add(k)
        else:  # drafted nothing: the schedule's k was 0, or every request in the step was prefilling
            assert k == 0 or (stats.prompt_tokens > 0 and stats.iteration_tokens == stats.prompt_tokens)
        previous = engine._last_batch
    assert seen == {2, 4}  # 8 running draft nothing; the tail drafts 2, then 4 alone


@pytest.mark.parametrize(("spec", "needle"), [
    (SpecConfig("draft_model", 3, "sim-1b-misaligned", draft_sample_method="probabilistic"), "greedy"),
    (SpecConfig("ngram", 3, draft_sample_method="probabilistic"), "deterministic"),
    (SpecConfig("suffix", 3, draft_sample_method="probabilistic"), "deterministic"),
])
def test_probabilistic_drafting_is_noted_where_the_drafter_has_no_distribution(spec: SpecConfig, needle: str) -> None:
    notes = build_engine(EngineConfig("sim-8b", speculative=spec)).notes
    assert any("probabilistic" in n and needle in n for n in notes), notes
    greedy = SpecConfig(spec.method, 3, spec.model)
    assert not any("probabilistic" in n for n in build_engine(EngineConfig("sim-8b", speculative=greedy)).notes)


def test_synthetic_rates_set_the_acceptance_whatever_the_draft() -> None:
    exact = SpecConfig("draft_model", 4, "sim-0.5b", rejection_sample_method="synthetic",
                       synthetic_acceptance_rates=[1.0, 0.0, 0.0, 0.0])
    assert _acceptance_length(exact) == pytest.approx(2.0)  # vLLM's schedule for synthetic_acceptance_length 2.0
    rates = [0.8, 0.6, 0.4, 0.2]
    decaying = SpecConfig("draft_model", 4, "sim-0.5b", rejection_sample_method="synthetic",
                          synthetic_acceptance_rates=rates)
    assert _acceptance_length(decaying, 0.7, copies=3) == pytest.approx(1 + sum(rates), abs=0.12)


def test_fly_accepts_a_rejected_draft_only_when_the_target_is_unsure_and_the_window_agrees() -> None:
    class View:
        def __init__(self, dists: list[np.ndarray]) -> None:
            self.dists = dists

        def raw(self, i: int) -> np.ndarray:
            return self.dists[i]

        def argmax(self, i: int) -> int:
            return int(np.argmax(self.dists[i]))

    flat = np.array([0.4, 0.35, 0.25])  # top-3 entropy 1.08 nats
    sharp = np.array([0.98, 0.01, 0.01])  # 0.11 nats
    rng = np.random.default_rng(0)
    fly = FlyVerifier(window=2, threshold=0.3, top_k=3)
    assert top_k_entropy(flat, 3) > 0.3 > top_k_entropy(sharp, 3)
    # draft 1 misses the argmax where the target is unsure; drafts 2, 3 then match: accepted, lossily
    view = View([flat, sharp, sharp, sharp])
    verdict = fly.verify(view, [1, 0, 0], [None] * 3, True, rng)  # type: ignore[arg-type]
    assert verdict.accepted == 3 and verdict.tokens == [1, 0, 0, 0]
    # where the target is sure, the miss is a rejection as in standard verification
    verdict = fly.verify(View([sharp, sharp, sharp, sharp]), [1, 0, 0], [None] * 3, True, rng)  # type: ignore[arg-type]
    assert verdict.accepted == 0 and verdict.tokens == [0]
    # and when a draft inside the window misses, it is rejected too
    verdict = fly.verify(View([flat, sharp, sharp, sharp]), [1, 2, 0], [None] * 3, True, rng)  # type: ignore[arg-type]
    assert verdict.accepted == 0


def test_suffix_trees_follow_the_most_frequent_continuation() -> None:
    settings = SuffixSettings(max_tree_depth=8, max_spec_factor=2.0, min_token_prob=0.1)
    buf = np.array([5, 6, 7, 8, 5, 6, 7, 9, 5, 6, 7, 8, 5, 6], dtype=np.int64)
    ends = np.flatnonzero(buf == buf[-1]) + 1
    draft = _speculate(buf, ends, buf[-8:], 4, settings, 10)
    # "5 6" occurred 3 times before (plus itself): 7 always follows, then 8 twice and 9 once
    # (then 5 6 after both 8s), and the match of length 2 scores best
    assert draft.tokens == [7, 8, 5, 6]
    assert draft.score == pytest.approx(0.75 + 0.75 * 2 / 3 + 0.5 + 0.5)
    tree = GlobalTree(vocab=10, max_requests=2)
    tree.add("a", [1, 2, 3, 4])
    tree.add("b", [1, 2, 3, 4])
    assert tree.speculate(np.array([1, 2], np.int64), 4, settings).tokens == [3, 4]
    tree.add("c", [2, 9])
    tree.add("d", [2, 9])  # the two oldest are evicted (FIFO)
    assert tree.speculate(np.array([1, 2], np.int64), 4, settings).tokens == [9]


def test_suffix_decoding_learns_from_earlier_responses() -> None:
    """Identical refusals: the global tree holds the first, so later ones are drafted from it."""
    items = [i for i in bundled_items() if i[0].startswith("refusal")]
    spec = SpecConfig("suffix", 8)
    one_by_one = build_engine(EngineConfig("sim-8b", speculative=spec, max_num_seqs=1))
    alone = build_engine(EngineConfig("sim-8b", speculative=SpecConfig("suffix", 8, suffix=SuffixSettings(
        max_cached_requests=0)), max_num_seqs=1))
    lengths = []
    for engine in (one_by_one, alone):
        for rid, messages, params in items:
            add(engine, rid, messages, params)
        run = drain(engine)
        specs = [f.spec for f in run.finished.values() if f.spec is not None]
        lengths.append(1 + sum(s.accepted for s in specs) / sum(s.steps for s in specs))
    assert lengths[0] > lengths[1] + 1.0, lengths


def test_heads_accept_more_than_a_separate_draft_and_eagle3_most() -> None:
    draft = _acceptance_length(SpecConfig("draft_model", 4, "sim-1b"))
    eagle = _acceptance_length(SpecConfig("eagle", 4, "h"))
    eagle3 = _acceptance_length(SpecConfig("eagle3", 4, "h"))
    weak = _acceptance_length(SpecConfig("draft_model", 4, "sim-0.5b"))
    assert weak < draft < eagle < eagle3
    assert 1.5 < weak < 2.3 and 2.4 < draft < 3.4  # either side of Spec-Bench's draft-model 2.19


def test_acceptance_falls_with_temperature_under_greedy_drafting() -> None:
    spec = SpecConfig("draft_model", 4, "sim-1b")
    cold, hot = _acceptance_length(spec, 0.0), _acceptance_length(spec, 1.0, copies=3)
    assert hot < cold - 0.1, (cold, hot)
    per_class_cold = {}
    for cls in CLASSES:
        items = [i for i in bundled_items() if i[0].startswith(cls)]
        run = run_prompts(EngineConfig("sim-8b", speculative=spec), items)
        specs = [f.spec for f in run.finished.values() if f.spec is not None]
        per_class_cold[cls] = 1 + sum(s.accepted for s in specs) / sum(s.steps for s in specs)
    assert max(per_class_cold.values()) - min(per_class_cold.values()) > 0.5, per_class_cold


class _FixedView:
    """A target that gives every draft the same p(x) and samples its bonus from two tokens."""

    def __init__(self, px: float) -> None:
        self.px = px

    def prob(self, i: int, token: int) -> float:
        return self.px

    def probs(self, i: int) -> np.ndarray:
        return np.array([0.5, 0.5])


@pytest.mark.parametrize("px", [1.0, 1.0 - 1e-10, 0.999])
def test_standard_draws_one_uniform_per_draft_whatever_p_is(px: float) -> None:
    """As vLLM's rejection sampler: a sampled request's step takes one uniform per draft token, so how
    many draws it takes (and every later draw of that request) does not hang on p(x)'s last bits."""
    rng = np.random.default_rng(7)
    verdict = StandardVerifier().verify(_FixedView(px), [1, 1, 1], [None, None, None], False, rng)  # type: ignore[arg-type]
    reference = np.random.default_rng(7)
    uniforms = reference.random(3)
    accepted = next((i for i, u in enumerate(uniforms) if not px >= u), 3)
    assert verdict.accepted == accepted
    if accepted == 3:
        reference.random()  # the bonus token's draw
        assert rng.random() == reference.random()
