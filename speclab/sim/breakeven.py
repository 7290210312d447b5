"""Where k stops paying, by the step model: break-even acceptance length and crossover batch.

A decode step of ``b`` sequences yields ``b`` tokens; a speculative step with k drafts yields
``b × τ`` (τ = acceptance length, bonus token included) and costs the verify of 1+k tokens per
sequence plus the drafting. Speculation pays while τ exceeds the ratio of the two step times, so
that ratio is the break-even acceptance length, and the crossover is the running batch at which
it rises past the τ a pair achieves. Uniform batches at one context length; a sketch of the
steady state, not a replay of a workload (the sweep measures that).
"""

from __future__ import annotations

from collections.abc import Iterable

from .timing import StepTimeModel, StepWork, attention_pairs

BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)


def uniform_work(model: StepTimeModel, batch: int, context: int, k: int, lookup: bool = False) -> StepWork:
    """One step of ``batch`` decoding sequences of ``context`` tokens, each verifying ``k`` drafts."""
    work = StepWork(tokens=batch * (1 + k), kv_read_tokens=batch * (context + 1 + k),
                    attn_pairs=batch * attention_pairs(1 + k, context))
    if k and model.draft is not None:
        work.draft_passes, work.draft_batch, work.draft_kv_tokens = k, batch, batch * context
    elif k and lookup:
        work.lookups = batch
    return work


def step_seconds(model: StepTimeModel, batch: int, context: int, k: int, lookup: bool = False) -> float:
    return model.step_time(uniform_work(model, batch, context, k, lookup))


def break_even(model: StepTimeModel, batch: int, context: int, k: int, lookup: bool = False) -> float:
    """The acceptance length at which k drafts per step match plain decoding's token rate."""
    return step_seconds(model, batch, context, k, lookup) / step_seconds(model, batch, context, 0)


def speedup(model: StepTimeModel, batch: int, context: int, k: int, acceptance_length: float,
            lookup: bool = False) -> float:
    return acceptance_length * step_seconds(model, batch, context, 0) / step_seconds(model, batch, context, k, lookup)


def crossover(model: StepTimeModel, acceptance_length: float, context: int, k: int,
              batches: Iterable[int] = BATCHES, lookup: bool = False) -> int | None:
    """The smallest batch at which k no longer pays at ``acceptance_length``; None if it pays throughout."""
    for batch in batches:
        if break_even(model, batch, context, k, lookup) >= acceptance_length:
            return batch
    return None


def acceptance_for_crossover(model: StepTimeModel, batch: int, context: int, k: int) -> float:
    """The acceptance length whose crossover falls at ``batch`` (the break-even there)."""
    return break_even(model, batch, context, k)
