"""Deterministic plans and the statistics of each arrival process."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pytest

from speclab.model.errors import InputError
from speclab.model.scenario import Scenario
from speclab.traffic.schedule import Plan, build_plan


def _scenario(arrival: dict[str, Any], **top: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "t", "seed": 5, "duration_s": 100, "arrival": arrival,
        "classes": {
            "greedy": {"weight": 3, "temperature": 0, "prompts": ["a", "b", "c"]},
            "sampled": {"weight": 1, "temperature": 0.8, "prompts": ["d"], "endpoint": "completions"},
            "pinned": {"weight": 1, "temperature": 1.0, "seed": 99, "prompts": ["e"]},
        },
    }
    data.update(top)
    return Scenario.model_validate(data)


def _gaps(plan: Plan) -> list[float]:
    times = [t for t, _ in plan.offsets()]
    return [b - a for a, b in itertools.pairwise(times)]


def test_same_seed_same_plan_other_seed_other_plan() -> None:
    scenario = _scenario({"process": "poisson", "rate": 5})
    a = build_plan(scenario).offsets()
    b = build_plan(scenario).offsets()
    c = build_plan(scenario, seed=6).offsets()
    assert [(t, r.prompt_class, r.sampling, r.messages, r.prompt) for t, r in a] == \
           [(t, r.prompt_class, r.sampling, r.messages, r.prompt) for t, r in b]
    assert [t for t, _ in a] != [t for t, _ in c]


def test_request_content_depends_only_on_seed_and_index() -> None:
    plan = build_plan(_scenario({"process": "poisson", "rate": 5}))
    assert plan.request(17) == plan.request(17)
    other = build_plan(_scenario({"process": "concurrency", "concurrency": 4}))
    assert other.request(17).sampling == plan.request(17).sampling


def test_seeds_only_for_stochastic_sampling_and_weights_respected() -> None:
    plan = build_plan(_scenario({"process": "constant", "rate": 10}))
    requests = [plan.request(i) for i in range(2000)]
    by_class: dict[str, list[Any]] = {}
    for r in requests:
        by_class.setdefault(r.prompt_class, []).append(r)
    assert all("seed" not in r.sampling for r in by_class["greedy"])
    seeds = {r.sampling["seed"] for r in by_class["sampled"]}
    assert len(seeds) > 0.95 * len(by_class["sampled"])
    assert {r.sampling["seed"] for r in by_class["pinned"]} == {99}
    assert all(r.endpoint == "completions" and r.prompt == "d" for r in by_class["sampled"])
    table = {item["ref"]: item for item in plan.prompt_items()}
    assert all(r.messages == [{"role": "user", "content": table[r.info["ref"]]["prompt"]}] for r in by_class["greedy"])
    # what a record keeps is a reference to the prompt, never its text
    assert all(set(r.info) <= {"endpoint", "index", "ref", "sha256", "has_schema"} for r in requests)
    assert all(r.info["sha256"] == table[r.info["ref"]]["sha256"] for r in requests)
    share = len(by_class["greedy"]) / len(requests)
    assert 0.57 < share < 0.63  # weight 3 of 5


def test_constant_rate_is_evenly_spaced() -> None:
    plan = build_plan(_scenario({"process": "constant", "rate": 4}, duration_s=10))
    offsets = plan.offsets()
    assert len(offsets) == 40
    assert all(g == pytest.approx(0.25) for g in _gaps(plan))


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    plan = build_plan(_scenario({"process": "poisson", "rate": 50}, duration_s=200))
    count = len(plan.offsets())
    assert abs(count - 10_000) < 400  # 4 sigma
    gaps = _gaps(plan)
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert 0.95 < cv < 1.05


def test_gamma_burstiness_sets_the_coefficient_of_variation() -> None:
    plan = build_plan(_scenario({"process": "gamma", "rate": 50, "burstiness": 0.25}, duration_s=200))
    gaps = _gaps(plan)
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.1)
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv == pytest.approx(2.0, rel=0.1)  # CV^2 = 1 / burstiness


def test_ramp_follows_the_integrated_rate() -> None:
    plan = build_plan(_scenario({"process": "ramp", "start_rate": 1, "end_rate": 9}, duration_s=100))
    times = [t for t, _ in plan.offsets()]
    first_half = sum(1 for t in times if t < 50)
    assert abs(first_half - 150) <= 1  # ∫0^50 (1 + 0.08 t) dt
    assert abs(len(times) - 500) <= 1
    assert times[-1] - times[-2] == pytest.approx(1 / 9, rel=0.02)


def test_rate_ladder() -> None:
    steps = [{"rate": 2, "duration_s": 5}, {"rate": 10, "duration_s": 5}]
    plan = build_plan(_scenario({"process": "steps", "steps": steps}))
    times = [t for t, _ in plan.offsets()]
    assert plan.duration_s == 10
    assert sum(1 for t in times if t < 5) == 10
    assert sum(1 for t in times if t >= 5) == 50


def test_concurrency_ladder() -> None:
    steps = [{"concurrency": c, "duration_s": 10} for c in (1, 4, 16, 64)]
    plan = build_plan(_scenario({"process": "steps", "steps": steps}))
    assert plan.mode == "closed"
    assert [plan.concurrency_at(t) for t in (0, 9.9, 10, 25, 39.9)] == [1, 1, 4, 16, 64]
    with pytest.raises(InputError):
        plan.offsets()


def test_set_rate_retimes_only_later_requests() -> None:
    plan = build_plan(_scenario({"process": "constant", "rate": 1}))
    gaps, rates = plan.unit_gaps(), plan.rate_function()
    before = [rates.time_at(gaps.mass(i)) for i in range(20)]
    rates.override(5.5, 10.0)
    after = [rates.time_at(gaps.mass(i)) for i in range(20)]
    assert after[:6] == before[:6]
    assert after[6] == pytest.approx(5.55)  # the half-elapsed gap finishes at the new rate
    assert after[7] - after[6] == pytest.approx(0.1)


def test_overrides() -> None:
    ladder = _scenario({"process": "steps", "steps": [{"concurrency": 2, "duration_s": 5}]})
    opened = build_plan(ladder, rate=3.0, duration_s=20)
    assert (opened.mode, opened.process, opened.duration_s, opened.requests) == ("open", "poisson", 20, None)
    closed = build_plan(_scenario({"process": "poisson", "rate": 2}), concurrency=8, requests=50)
    assert (closed.mode, closed.concurrency_at(0), closed.requests, closed.duration_s) == ("closed", 8, 50, None)
    assert len(build_plan(_scenario({"process": "constant", "rate": 100}), requests=30).offsets()) == 30
    assert build_plan(_scenario({"process": "gamma", "rate": 2, "burstiness": 2}), rate=9).segments[0].rate == 9
    for bad in ({"rate": 1.0, "concurrency": 2}, {"rate": 0.0}, {"concurrency": 0}, {"duration_s": -1.0}):
        with pytest.raises(InputError):
            build_plan(_scenario({"process": "poisson", "rate": 2}), **bad)


def test_warmup_by_time_and_count() -> None:
    plan = build_plan(_scenario({"process": "constant", "rate": 1}, warmup_s=3, warmup_requests=1))
    assert plan.is_warmup(0, 10.0)
    assert plan.is_warmup(5, 2.9)
    assert not plan.is_warmup(5, 3.0)


def test_unit_gaps_replay_identically_when_asked_out_of_order() -> None:
    gaps = build_plan(_scenario({"process": "poisson", "rate": 5})).unit_gaps()
    forward = [gaps.mass(i) for i in range(0, 50, 3)]
    assert gaps.mass(10) == pytest.approx(build_plan(_scenario({"process": "poisson", "rate": 5})).unit_gaps().mass(10))
    assert [gaps.mass(i) for i in range(0, 50, 3)] == forward
