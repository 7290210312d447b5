from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from speclab.gates.equivalence import chi2_sf, evaluate_equivalence, greedy_difference, homogeneity_test
from speclab.model.gates import EquivalenceGate
from speclab.model.records import RequestRecord

VOCAB = 40


def rec(variant: str, ids: list[int], *, seed: int = 0, temperature: float = 0.0, **sampling: object) -> RequestRecord:
    return RequestRecord(
        request_id=f"{variant}-{seed}", variant=variant, prompt_class="c", intended=0.0, done=1.0,
        output_token_ids=ids, sampling={"temperature": temperature, "seed": seed, "max_tokens": 8, **sampling},
    )


def draw(probs: np.ndarray, n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).choice(len(probs), size=n, p=probs)]


def zipf(shift: float = 0.0) -> np.ndarray:
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.6
    weights[:3] *= [1.0 - shift, 1.0, 1.0 + shift]
    return weights / weights.sum()


def test_chi2_survival_matches_tables() -> None:
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(6.635, 1) == pytest.approx(0.01, abs=1e-4)
    assert chi2_sf(0.0, 3) == 1.0
    assert chi2_sf(200.0, 4) < 1e-40


@pytest.mark.parametrize("method", ["chi2", "g"])
def test_same_distribution_high_p_shifted_tiny_p(method: Literal["chi2", "g"]) -> None:
    base = draw(zipf(), 4000, seed=1)
    same = homogeneity_test(base, draw(zipf(), 4000, seed=2), method=method)
    shifted = homogeneity_test(base, draw(zipf(0.4), 4000, seed=2), method=method)
    assert same.p_value > 0.05
    assert shifted.p_value < 1e-6
    assert same.categories < VOCAB  # the rare tail was pooled
    assert same.dof == same.categories - 1


def test_rare_categories_are_pooled() -> None:
    test = homogeneity_test([0] * 50 + [1] * 50 + [2], [0] * 50 + [1] * 50 + [3], min_expected=5)
    assert test.categories == 2
    assert test.p_value > 0.5


def test_greedy_first_difference_with_context() -> None:
    line = greedy_difference(rec("base", [5, 6, 7, 8, 9]), rec("k2", [5, 6, 7, 1, 9]), "fq-1",
                             decode=lambda ids: "".join(chr(97 + i) for i in ids), context=2)
    assert line == "fq-1: first difference at token 3 of 5/5: baseline [8] 'i', speculative [1] 'b'; after [6, 7] 'gh'"
    assert greedy_difference(rec("b", [1, 2]), rec("k", [1, 2]), "x") is None
    shorter = greedy_difference(rec("b", [1, 2, 3]), rec("k", [1, 2]), "x")
    assert shorter is not None and "speculative end of output" in shorter


def test_greedy_gate() -> None:
    greedy = {
        "baseline": {"a": rec("baseline", [1, 2, 3]), "b": rec("baseline", [4, 5])},
        "k2": {"a": rec("k2", [1, 2, 3]), "b": rec("k2", [4, 5])},
    }
    settings = EquivalenceGate(mode="greedy")
    result = evaluate_equivalence(settings, "baseline", greedy=greedy)
    assert result.passed and result.metrics["greedy_identical"] == {"k2": 2}
    greedy["k4"] = {"a": rec("k4", [1, 2, 3]), "b": rec("k4", [4, 6])}
    result = evaluate_equivalence(settings, "baseline", greedy=greedy)
    assert not result.passed and result.exit_code == 12
    assert result.details[0] == "FAIL greedy k4 b: first difference at token 1 of 2/2: baseline [5], speculative [6]; after [4]"


def test_greedy_needs_temperature_zero_sent() -> None:
    unset = {"baseline": {"a": rec("baseline", [1])}, "k2": {"a": rec("k2", [1])}}
    for arm in unset.values():
        del arm["a"].sampling["temperature"]
    result = evaluate_equivalence(EquivalenceGate(mode="greedy"), "baseline", greedy=unset)
    assert not result.passed
    assert "FAIL greedy k2 a: greedy comparison sent no temperature, not 0" in result.details
    warm = {"baseline": {"a": rec("baseline", [1], temperature=0.5)}, "k2": {"a": rec("k2", [1], temperature=0.5)}}
    result = evaluate_equivalence(EquivalenceGate(mode="greedy"), "baseline", greedy=warm)
    assert "FAIL greedy k2 a: greedy comparison sent temperature 0.5, not 0" in result.details


def test_sampling_params_mismatch_fails() -> None:
    greedy = {"baseline": {"a": rec("baseline", [1], top_p=1.0)}, "k2": {"a": rec("k2", [1], top_p=0.9)}}
    result = evaluate_equivalence(EquivalenceGate(mode="greedy"), "baseline", greedy=greedy)
    assert not result.passed
    assert "FAIL greedy k2 a: sampling parameter 'top_p' differs: baseline 1.0, speculative 0.9" in result.details


def sampled_arm(variant: str, probs: np.ndarray, n: int, seed: int, temperature: float = 1.0) -> list[RequestRecord]:
    return [rec(variant, [t, 0], seed=i, temperature=temperature) for i, t in enumerate(draw(probs, n, seed))]


def test_distribution_gate() -> None:
    settings = EquivalenceGate(mode="distribution", samples=1500)
    sampled = {
        "baseline": {"p0": sampled_arm("baseline", zipf(), 1500, 11)},
        "k2": {"p0": sampled_arm("k2", zipf(), 1500, 12)},
        "drift": {"p0": sampled_arm("drift", zipf(0.4), 1500, 12)},
    }
    result = evaluate_equivalence(settings, "baseline", sampled=sampled)
    assert not result.passed
    assert result.metrics["p_values"]["k2"]["p0"] > 0.05
    assert result.metrics["p_values"]["drift"]["p0"] < 1e-6
    assert any(d.startswith("FAIL distribution drift p0: p = ") for d in result.details)
    assert not any(d.startswith("FAIL distribution k2") for d in result.details)


def test_distribution_sampling_mismatch_fails_even_when_outputs_match() -> None:
    base = sampled_arm("baseline", zipf(), 200, 3)
    spec = sampled_arm("k2", zipf(), 200, 3, temperature=0.7)
    result = evaluate_equivalence(EquivalenceGate(mode="distribution"), "baseline",
                                  sampled={"baseline": {"p": base}, "k2": {"p": spec}})
    assert not result.passed
    assert "FAIL distribution k2 p sample 0: sampling parameter 'temperature' differs: baseline 1.0, speculative 0.7" in result.details


def test_the_default_compares_four_tokens_so_drift_after_the_prefill_token_is_seen() -> None:
    assert EquivalenceGate().first_tokens == 4
    # The first token comes from prefill (identical on both paths); speculation drifts the second.
    base = [rec("baseline", [1, t, 0, 0], seed=i, temperature=1.0) for i, t in enumerate(draw(zipf(), 1500, 21))]
    spec = [rec("k2", [1, t, 0, 0], seed=i, temperature=1.0) for i, t in enumerate(draw(zipf(0.4), 1500, 22))]
    sampled = {"baseline": {"p": base}, "k2": {"p": spec}}
    assert not evaluate_equivalence(EquivalenceGate(mode="distribution", samples=1500), "baseline",
                                    sampled=sampled).passed
    blind = EquivalenceGate(mode="distribution", samples=1500, first_tokens=1)
    assert evaluate_equivalence(blind, "baseline", sampled=sampled).passed, "one token cannot see it"
