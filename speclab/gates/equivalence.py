"""Verification equals plain decoding: greedy token identity and, at T>0, equal output distributions.

Greedy speculative decoding is lossless, so any differing token id is a bug (a lossy verifier);
the first differing position is reported with both tokens and the context before it. At T>0 the
output is only distribution-preserving, so the two arms' first output tokens are compared with
a homogeneity test over many samples. Both comparisons are only meaningful when the two arms were
sent exactly the same sampling parameters, so that is checked first and a mismatch fails alone.
On real GPUs that are not batch-invariant the greedy comparison is ``equivalence_real``'s
tolerance against the baseline's own noise floor. A variant whose rejection method is lossy by
design (synthetic, FLy) fails whatever its outputs, and is told why.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from speclab.model.gates import EquivalenceGate
from speclab.model.records import RequestRecord

from .equivalence_real import evaluate_tolerance
from .result import StageResult
from .stages import EQUIVALENCE
from .tokenizer_alignment import first_difference

Decode = Callable[[Sequence[int]], str]
IGNORED_SAMPLING_KEYS: Final = frozenset({"model", "request_id"})


def _gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (series below a+1, continued fraction above)."""
    if x <= 0.0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1.0
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for a chi-square distribution with ``dof`` degrees of freedom."""
    if dof <= 0:
        return 1.0
    return _gamma_q(dof / 2.0, statistic / 2.0)


@dataclass(frozen=True, slots=True)
class DistributionTest:
    p_value: float
    statistic: float
    dof: int
    categories: int  # after pooling
    n_baseline: int
    n_speculative: int
    method: str
    top: list[str] = field(default_factory=list)  # the largest contributions, readable


def homogeneity_test(
    baseline: Sequence[Hashable],
    speculative: Sequence[Hashable],
    *,
    min_expected: float = 5.0,
    method: Literal["chi2", "g"] = "chi2",
) -> DistributionTest:
    """Do two samples come from one categorical distribution? A 2×K chi-square or G test.

    Categories whose expected count in the smaller arm is below ``min_expected`` are pooled into
    one "other" category (merged further if still too rare), the usual validity rule for both tests.
    """
    if not baseline or not speculative:
        raise ValueError("homogeneity_test needs samples in both arms")
    counts_a, counts_b = Counter(baseline), Counter(speculative)
    n_a, n_b = len(baseline), len(speculative)
    total = n_a + n_b
    smaller = min(n_a, n_b)
    cells: list[tuple[str, int, int]] = []
    pooled = [0, 0]
    for category in sorted(set(counts_a) | set(counts_b), key=lambda c: -(counts_a[c] + counts_b[c])):
        a, b = counts_a[category], counts_b[category]
        if (a + b) * smaller / total < min_expected:
            pooled[0] += a
            pooled[1] += b
        else:
            cells.append((repr(category), a, b))
    if pooled[0] + pooled[1]:
        if (sum(pooled)) * smaller / total < min_expected and cells:
            name, a, b = cells.pop()
            cells.append((f"{name}+other", a + pooled[0], b + pooled[1]))
        else:
            cells.append(("other", pooled[0], pooled[1]))
    statistic = 0.0
    contributions: list[tuple[float, str]] = []
    for name, a, b in cells:
        part = 0.0
        for observed, n in ((a, n_a), (b, n_b)):
            expected = (a + b) * n / total
            if method == "g":
                part += 2.0 * observed * math.log(observed / expected) if observed else 0.0
            else:
                part += (observed - expected) ** 2 / expected
        statistic += part
        contributions.append((part, f"{name}: baseline {a}, speculative {b}"))
    dof = max(0, len(cells) - 1)
    top = [text for _, text in sorted(contributions, key=lambda item: -item[0])[:3]]
    return DistributionTest(
        p_value=chi2_sf(max(statistic, 0.0), dof), statistic=statistic, dof=dof, categories=len(cells),
        n_baseline=n_a, n_speculative=n_b, method=method, top=top,
    )


def sampling_mismatches(baseline: RequestRecord, speculative: RequestRecord, label: str) -> list[str]:
    """Every sampling parameter that differs between the two arms' requests (``model`` excepted)."""
    a = {k: v for k, v in baseline.sampling.items() if k not in IGNORED_SAMPLING_KEYS}
    b = {k: v for k, v in speculative.sampling.items() if k not in IGNORED_SAMPLING_KEYS}
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            out.append(
                f"{label}: sampling parameter {key!r} differs: baseline {a.get(key, '<unset>')!r}, "
                f"speculative {b.get(key, '<unset>')!r}"
            )
    return out


def _tokens(ids: Sequence[int], decode: Decode | None) -> str:
    return f"{list(ids)} {decode(ids)!r}" if decode is not None else str(list(ids))


def greedy_difference(
    baseline: RequestRecord, speculative: RequestRecord, label: str, *, decode: Decode | None = None, context: int = 8
) -> str | None:
    """None when the token ids are identical; else the first differing position, tokens and context."""
    a, b = baseline.output_token_ids, speculative.output_token_ids
    if a == b:
        return None
    pos = first_difference(a, b)
    before = _tokens(a[max(0, pos - context):pos], decode)
    got_a = _tokens(a[pos:pos + 1], decode) if pos < len(a) else "end of output"
    got_b = _tokens(b[pos:pos + 1], decode) if pos < len(b) else "end of output"
    return (
        f"{label}: first difference at token {pos} of {len(a)}/{len(b)}: baseline {got_a}, "
        f"speculative {got_b}; after {before}"
    )


def _failed(record: RequestRecord | None) -> str | None:
    if record is None:
        return "no response"
    if not record.ok:
        return f"request failed ({record.error_kind}: {record.error_message})"
    return None


def evaluate_equivalence(
    settings: EquivalenceGate,
    baseline: str,
    *,
    greedy: Mapping[str, Mapping[str, RequestRecord]] | None = None,
    sampled: Mapping[str, Mapping[str, Sequence[RequestRecord]]] | None = None,
    decode: Decode | None = None,
    lossy: Mapping[str, str] | None = None,
    comparison: tuple[str, str] = ("exact", "greedy outputs must be identical"),
    noise: Mapping[str, RequestRecord] | None = None,
) -> StageResult:
    """The equivalence stage (exit 12).

    ``greedy``: variant -> case id -> record at temperature 0. ``sampled``: variant -> prompt key
    -> the T>0 samples in send order (sample i of every arm had the same seed). The distribution
    test runs per prompt; its threshold is Bonferroni-corrected over the prompts tested.
    ``lossy``: variant -> why its rejection method is lossy. ``comparison``: (``exact`` or
    ``tolerance``, why); under ``tolerance`` ``noise`` is the baseline's second greedy run at another
    batch size and every record carries logprobs.
    """
    failures: list[str] = []
    details: list[str] = []
    mode, why = comparison
    metrics: dict[str, Any] = {"mode": settings.mode, "comparison": mode, "comparison_reason": why}
    details.append(f"greedy comparison: {mode} ({why})")
    for variant, note in (lossy or {}).items():
        failures.append(f"{variant}: {note}; equivalence needs a lossless rejection_sample_method (standard or block)")
    if settings.greedy and mode == "tolerance":
        if not greedy or baseline not in greedy or noise is None:
            failures.append(f"greedy: no greedy responses from the baseline {baseline!r} at two batch sizes")
        else:
            for variant, records in greedy.items():
                for case_id, base in greedy[baseline].items():
                    spec = records.get(case_id)
                    if variant != baseline and spec is not None:
                        failures.extend(sampling_mismatches(base, spec, f"greedy {variant} {case_id}"))
            more, lines, extra = evaluate_tolerance(
                settings, baseline, greedy[baseline], noise, {v: r for v, r in greedy.items() if v != baseline})
            failures.extend(more)
            details.extend(lines)
            metrics.update(extra)
    elif settings.greedy:
        if not greedy or baseline not in greedy:
            failures.append(f"greedy: no greedy responses from the baseline {baseline!r}")
        else:
            identical: dict[str, int] = {}
            for variant, records in greedy.items():
                if variant == baseline:
                    continue
                same = 0
                for case_id, base in greedy[baseline].items():
                    label = f"greedy {variant} {case_id}"
                    spec = records.get(case_id)
                    base_problem, spec_problem = _failed(base), _failed(spec)
                    if base_problem or spec_problem or spec is None:
                        failures.append(f"{label}: " + (f"baseline {base_problem}" if base_problem else str(spec_problem)))
                        continue
                    mismatched = sampling_mismatches(base, spec, label)
                    temperature = base.sampling.get("temperature")
                    if temperature is None:  # the server's default (vLLM: 1.0) samples
                        mismatched.append(f"{label}: greedy comparison sent no temperature, not 0")
                    elif float(temperature) != 0.0:
                        mismatched.append(f"{label}: greedy comparison sent temperature {temperature}, not 0")
                    failures.extend(mismatched)
                    difference = greedy_difference(base, spec, label, decode=decode)
                    if difference:
                        failures.append(difference)
                    elif not mismatched:
                        same += 1
                identical[variant] = same
                details.append(f"greedy {variant}: {same}/{len(greedy[baseline])} outputs token-identical to baseline")
            metrics["greedy_identical"] = identical
    if settings.distribution:
        failures_before = len(failures)
        p_values: dict[str, dict[str, float]] = {}
        if not sampled or baseline not in sampled:
            failures.append(f"distribution: no T>0 samples from the baseline {baseline!r}")
        else:
            prompts = sampled[baseline]
            threshold = settings.min_p_value / max(1, len(prompts))
            for variant, per_prompt in sampled.items():
                if variant == baseline:
                    continue
                for key, base_samples in prompts.items():
                    label = f"distribution {variant} {key}"
                    spec_samples = per_prompt.get(key, [])
                    if len(spec_samples) != len(base_samples):
                        failures.append(f"{label}: {len(spec_samples)} samples, baseline has {len(base_samples)}")
                    for i, (a, b) in enumerate(zip(base_samples, spec_samples, strict=False)):
                        failures.extend(sampling_mismatches(a, b, f"{label} sample {i}"))
                    base_ok = [tuple(r.output_token_ids[: settings.first_tokens]) for r in base_samples if r.ok]
                    spec_ok = [tuple(r.output_token_ids[: settings.first_tokens]) for r in spec_samples if r.ok]
                    if not base_ok or not spec_ok:
                        failures.append(f"{label}: no successful samples to compare")
                        continue
                    test = homogeneity_test(
                        base_ok, spec_ok, min_expected=settings.min_expected_count, method=settings.test
                    )
                    p_values.setdefault(variant, {})[key] = test.p_value
                    line = (
                        f"{label}: p = {test.p_value:.3g} ({test.method} = {test.statistic:.2f}, dof {test.dof}, "
                        f"n = {test.n_baseline}/{test.n_speculative}, first {settings.first_tokens} token(s)); "
                        f"threshold {threshold:.3g}"
                    )
                    if test.p_value < threshold:
                        failures.append(f"{line}; output distributions differ; largest: {'; '.join(test.top)}")
                    else:
                        details.append(line)
        metrics["p_values"] = p_values
        metrics["distribution_failures"] = len(failures) - failures_before
    summary = (
        f"equivalence ({settings.mode}, {mode}): {len(failures)} problems" if failures
        else f"equivalence ({settings.mode}, {mode}): speculative output matches the baseline"
    )
    return StageResult.of(EQUIVALENCE, failures, summary, details, metrics)
