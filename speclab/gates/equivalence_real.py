"""Greedy equivalence on real GPUs, where a clean pair can differ: the baseline's own noise floor.

Real kernels are not batch-invariant: the same greedy request can come out differently at another
batch size, and speculative verification batches 1+k tokens per sequence. Unless every server runs
vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``, then outputs must be identical), the gate
sends the greedy cases to the baseline twice, one at a time and all at once, and measures how far
the two drift (logprobs on the common prefix) and where they diverge. A speculative output then
passes when its logprobs stay within that noise floor, any divergence comes where the baseline's
own top two tokens nearly tie, not before ``min_divergence_position`` unless the baseline itself
diverged that early, and no more outputs diverge than the floor plus an allowance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speclab.model.gates import EquivalenceGate
from speclab.model.records import RequestRecord

from .tokenizer_alignment import first_difference

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"


def comparison_mode(setting: str, *, simulated: bool, server_envs: list[Mapping[str, str]]) -> tuple[str, str]:
    """(``exact`` | ``tolerance``, why) for the gates' ``comparison`` setting and the engine in use."""
    if setting != "auto":
        return setting, f"comparison = {setting!r} in the gates file"
    if simulated:
        return "exact", "simulator: batch-invariant by construction, so greedy outputs must be identical"
    if server_envs and all(env.get(BATCH_INVARIANT_ENV) == "1" for env in server_envs):
        return "exact", f"vLLM batch-invariant mode ({BATCH_INVARIANT_ENV}=1 on every server)"
    return "tolerance", ("vLLM on kernels that are not batch-invariant: divergences are judged against the "
                         "baseline's own noise floor at two batch sizes")


def logprob_request(endpoint: str) -> dict[str, Any]:
    """The sampling keys that make vLLM return the chosen token's logprob and the top two."""
    return {"logprobs": True, "top_logprobs": 2} if endpoint == "chat" else {"logprobs": 2}


@dataclass(frozen=True, slots=True)
class Drift:
    position: int | None  # first differing token (None: identical)
    logprob_drift: float  # largest |Δ logprob| over the common prefix
    compared: int  # positions with a logprob on both sides


def drift(a: RequestRecord, b: RequestRecord) -> Drift:
    ids_a, ids_b = a.output_token_ids, b.output_token_ids
    position = None if ids_a == ids_b else first_difference(ids_a, ids_b)
    prefix = min(len(ids_a), len(ids_b)) if position is None else position
    lp_a, lp_b = a.output_logprobs, b.output_logprobs
    worst, compared = 0.0, 0
    for i in range(min(prefix, len(lp_a), len(lp_b))):
        x, y = lp_a[i].get("logprob"), lp_b[i].get("logprob")
        if isinstance(x, int | float) and isinstance(y, int | float) and math.isfinite(x) and math.isfinite(y):
            worst = max(worst, abs(float(x) - float(y)))
            compared += 1
    return Drift(position, worst, compared)


def tie_margin(base: RequestRecord, other: RequestRecord, position: int) -> float | None:
    """How far below the baseline's top token the other's token was, at ``position`` (None: unknown)."""
    if position >= len(base.output_logprobs) or position >= len(other.output_logprobs):
        return None
    top = base.output_logprobs[position].get("top") or {}
    token = other.output_logprobs[position].get("token")
    if not top or token not in top:
        return None
    return max(float(v) for v in top.values()) - float(top[token])


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    cases: int
    divergent: int
    earliest: int | None
    logprob_drift: float

    @property
    def divergent_pct(self) -> float:
        return 100.0 * self.divergent / self.cases if self.cases else 0.0


def noise_floor(alone: Mapping[str, RequestRecord], together: Mapping[str, RequestRecord]) -> NoiseFloor:
    drifts = [drift(alone[c], together[c]) for c in alone if c in together and alone[c].ok and together[c].ok]
    positions = [d.position for d in drifts if d.position is not None]
    return NoiseFloor(len(drifts), len(positions), min(positions) if positions else None,
                      max((d.logprob_drift for d in drifts), default=0.0))


def evaluate_tolerance(settings: EquivalenceGate, baseline: str, alone: Mapping[str, RequestRecord],
                       together: Mapping[str, RequestRecord], variants: Mapping[str, Mapping[str, RequestRecord]],
                       ) -> tuple[list[str], list[str], dict[str, Any]]:
    """(failures, details, metrics) of the tolerance comparison of every variant against ``alone``."""
    failures: list[str] = []
    floor = noise_floor(alone, together)
    allowed = max(settings.min_logprob_tolerance, settings.noise_factor * floor.logprob_drift)
    details = [f"noise floor: the baseline against itself at batch 1 and {len(together)} diverged in "
               f"{floor.divergent}/{floor.cases} outputs (earliest at token {floor.earliest}), logprobs drifted up "
               f"to {floor.logprob_drift:.4f} nats; allowed drift {allowed:.4f} nats"]
    if not any(r.output_logprobs for r in alone.values()):
        failures.append(f"tolerance: the baseline {baseline!r} returned no logprobs; the comparison needs them")
        return failures, details, {}
    divergent: dict[str, int] = {}
    for variant, records in variants.items():
        count = 0
        for case, base in alone.items():
            label = f"greedy {variant} {case}"
            spec = records.get(case)
            if spec is None or not spec.ok or not base.ok:
                failures.append(f"{label}: no successful response to compare")
                continue
            d = drift(base, spec)
            if d.logprob_drift > allowed:
                failures.append(f"{label}: logprobs drift {d.logprob_drift:.4f} nats on the common prefix, over the "
                                f"allowed {allowed:.4f} (noise floor {floor.logprob_drift:.4f})")
            if d.position is None:
                continue
            count += 1
            early = d.position < settings.min_divergence_position
            if early and (floor.earliest is None or d.position < floor.earliest):
                failures.append(f"{label}: diverges at token {d.position}, before token "
                                f"{settings.min_divergence_position}, where the baseline never diverged from itself")
                continue
            margin = tie_margin(base, spec, d.position)
            if margin is None or margin > settings.max_tie_margin:
                shown = "unknown (not among the baseline's top two)" if margin is None else f"{margin:.4f} nats"
                failures.append(f"{label}: diverges at token {d.position} where the baseline's top tokens do not "
                                f"nearly tie (margin {shown}; a tie is within {settings.max_tie_margin:g})")
        divergent[variant] = count
        share = 100.0 * count / len(alone) if alone else 0.0
        details.append(f"greedy {variant}: {count}/{len(alone)} outputs diverge from the baseline "
                       f"(noise floor {floor.divergent_pct:.0f}%)")
        if share > floor.divergent_pct + settings.max_extra_divergent_pct:
            failures.append(f"greedy {variant}: {share:.0f}% of outputs diverge, over the noise floor's "
                            f"{floor.divergent_pct:.0f}% + {settings.max_extra_divergent_pct:g} points")
    metrics = {"noise_floor": {"cases": floor.cases, "divergent": floor.divergent, "earliest": floor.earliest,
                               "logprob_drift": floor.logprob_drift, "allowed_drift": allowed},
               "greedy_divergent": divergent}
    return failures, details, metrics
