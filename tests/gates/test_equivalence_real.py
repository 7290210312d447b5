"""Greedy equivalence on real GPUs: the mode chosen by engine, the noise floor, ties, lossy methods."""

from __future__ import annotations

from typing import Any

from speclab.gates.equivalence import evaluate_equivalence
from speclab.gates.equivalence_real import comparison_mode, logprob_request, noise_floor
from speclab.model.gates import EquivalenceGate
from speclab.model.records import RequestRecord

SETTINGS = EquivalenceGate(mode="greedy", min_divergence_position=4, max_tie_margin=0.1, max_extra_divergent_pct=40)


def rec(variant: str, case: str, ids: list[int], logprobs: list[float], tops: dict[int, dict[str, float]] | None = None
        ) -> RequestRecord:
    entries: list[dict[str, Any]] = []
    for i, (t, lp) in enumerate(zip(ids, logprobs, strict=True)):
        entries.append({"token": f"t{t}", "logprob": lp, "top": (tops or {}).get(i, {f"t{t}": lp})})
    return RequestRecord(request_id=f"{variant}-{case}", variant=variant, prompt_class="c", intended=0.0, done=1.0,
                         output_token_ids=ids, output_logprobs=entries,
                         sampling={"temperature": 0.0, "seed": 0, "max_tokens": 8, "logprobs": True})


IDS = [1, 2, 3, 4, 5, 6, 7, 8]
LPS = [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8]
TIE_AT_5 = {5: {"t6": -0.60, "t9": -0.64}}  # the baseline's top two nearly tie at token 5


def cases(variant: str, shift: float = 0.0, diverge: int | None = None) -> dict[str, RequestRecord]:
    out = {}
    for c in ("a", "b", "c"):
        ids = list(IDS)
        if diverge is not None and c == "a":
            ids[diverge:] = [9] * (len(ids) - diverge)
        out[c] = rec(variant, c, ids, [x + shift for x in LPS], TIE_AT_5)
    return out


def judge(spec: dict[str, RequestRecord], noise_shift: float = 0.003) -> tuple[bool, list[str]]:
    base = cases("base")
    result = evaluate_equivalence(SETTINGS, "base", greedy={"base": base, "k4": spec}, noise=cases("base", noise_shift),
                                  comparison=("tolerance", "vLLM on real kernels"))
    return result.passed, result.details


def test_mode_is_chosen_by_engine() -> None:
    assert comparison_mode("auto", simulated=True, server_envs=[{}])[0] == "exact"
    assert comparison_mode("auto", simulated=False, server_envs=[{"VLLM_BATCH_INVARIANT": "1"}] * 2)[0] == "exact"
    mode, why = comparison_mode("auto", simulated=False, server_envs=[{"VLLM_BATCH_INVARIANT": "1"}, {}])
    assert mode == "tolerance" and "noise floor" in why
    assert comparison_mode("tolerance", simulated=True, server_envs=[])[0] == "tolerance"
    assert logprob_request("chat") == {"logprobs": True, "top_logprobs": 2}
    assert logprob_request("completions") == {"logprobs": 2}


def test_drift_within_the_noise_floor_passes_and_is_stated() -> None:
    passed, details = judge(cases("k4", 0.005))
    assert passed, details
    assert any("noise floor" in d and "allowed drift 0.0200" in d for d in details)
    assert details[0].startswith("greedy comparison: tolerance")


def test_drift_over_the_floor_fails() -> None:
    passed, details = judge(cases("k4", 0.08))
    assert not passed and any("logprobs drift 0.0800 nats" in d for d in details)


def test_a_divergence_at_a_near_tie_passes_elsewhere_fails() -> None:
    assert judge(cases("k4", 0.0, diverge=5))[0]  # the baseline's top two tie at token 5
    passed, details = judge(cases("k4", 0.0, diverge=6))
    assert not passed and any("diverges at token 6 where the baseline's top tokens do not nearly tie" in d
                              for d in details)
    passed, details = judge(cases("k4", 0.0, diverge=2))
    assert not passed and any("diverges at token 2, before token 4" in d for d in details)


def test_more_divergent_outputs_than_the_floor_allows_fail() -> None:
    strict = SETTINGS.model_copy(update={"max_extra_divergent_pct": 10.0})
    base = cases("base")
    result = evaluate_equivalence(strict, "base", greedy={"base": base, "k4": cases("k4", diverge=5)},
                                  noise=cases("base"), comparison=("tolerance", "x"))
    assert not result.passed and any("33% of outputs diverge, over the noise floor's 0% + 10 points" in d
                                     for d in result.details)


def test_noise_floor_counts_the_baselines_own_divergences() -> None:
    floor = noise_floor(cases("base"), cases("base", 0.01, diverge=5))
    assert (floor.cases, floor.divergent, floor.earliest) == (3, 1, 5)
    assert abs(floor.logprob_drift - 0.01) < 1e-9


def test_missing_logprobs_fail_by_name() -> None:
    base = {c: RequestRecord(request_id=c, variant="base", prompt_class="c", intended=0.0, done=1.0,
                             output_token_ids=IDS, sampling={"temperature": 0.0}) for c in "ab"}
    result = evaluate_equivalence(SETTINGS, "base", greedy={"base": base, "k4": base}, noise=base,
                                  comparison=("tolerance", "x"))
    assert not result.passed and any("returned no logprobs" in d for d in result.details)


def test_a_lossy_method_fails_even_when_outputs_match() -> None:
    base = cases("base")
    result = evaluate_equivalence(SETTINGS, "base", greedy={"base": base, "fly": cases("fly")},
                                  lossy={"fly": "rejection_sample_method 'fly' is lossy: ..."})
    assert not result.passed
    assert any(d.startswith("FAIL fly: rejection_sample_method 'fly' is lossy") and "lossless" in d
               for d in result.details)
    assert result.metrics["comparison"] == "exact"
