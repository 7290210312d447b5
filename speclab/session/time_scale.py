"""One time scale per run: the S given on the command line, or the one ``auto`` derives from the load.

``auto`` (the default) estimates each simulator's running batch from the plan (closed loop: the
concurrency, capped by the variant's max_num_seqs; open loop: Little's law over the peak rate and
the mean max_tokens at a reference modelled time per token) and weighs it by the variant's draft
length against the host capacity calibrated in ``speclab.model.time_scale``. Real servers always
run at S = 1; a scale asked of one, or of servers speclab did not start, is bad input.
"""

from __future__ import annotations

from speclab.model.errors import InputError
from speclab.model.lab import Lab
from speclab.model.time_scale import REFERENCE_TPOT_S, SimLoad, TimeScale, auto_time_scale
from speclab.servers.backends import AUTO, EngineId, EngineRequest
from speclab.servers.backends.registry import backend
from speclab.traffic.schedule import Plan


def mean_max_tokens(plan: Plan) -> float:
    """The plan's mean max_tokens over its classes, by class weight (the mean of each class's prompts)."""
    total = weight = 0.0
    for cls in plan.classes:
        fixed = cls.sampling.get("max_tokens")
        sizes = [fixed] if fixed is not None else [item.get("max_tokens") or 256 for item in cls.items] or [256]
        total += cls.weight * sum(sizes) / len(sizes)
        weight += cls.weight
    return total / weight if weight else 256.0


def peak_rate(plan: Plan) -> float:
    """The highest open-loop rate the plan reaches (at a segment's start or, for a ramp, its end)."""
    rates = []
    for i, seg in enumerate(plan.segments):
        rates.append(seg.rate)
        end = plan.segments[i + 1].start if i + 1 < len(plan.segments) else plan.duration_s
        if seg.slope and end is not None:
            rates.append(seg.rate + seg.slope * (end - seg.start))
    return max(rates, default=0.0)


def planned_loads(lab: Lab, variants: tuple[str, ...], plan: Plan) -> list[SimLoad]:
    """Each simulator's expected running batch and draft length under ``plan``."""
    if plan.mode == "closed":
        offered = float(max((n for _, n in plan.concurrency_steps), default=1))
    else:
        offered = peak_rate(plan) * mean_max_tokens(plan) * REFERENCE_TPOT_S
    if plan.requests is not None:
        offered = min(offered, float(plan.requests))
    loads = []
    for name in variants:
        eff = lab.effective(name)
        running = offered if eff.max_num_seqs is None else min(offered, float(eff.max_num_seqs))
        k = (eff.num_speculative_tokens or 0) if eff.speculative else 0
        loads.append(SimLoad(name, running, k))
    return loads


def refuse_for_real_engine(asked: float | None, engine_option: EngineRequest) -> None:
    """``--engine vllm`` (any real engine) with a time scale: bad input, said before any engine is looked for."""
    if asked is not None and asked != 1.0 and engine_option != AUTO and not backend(engine_option).simulated:
        raise InputError(f"--time-scale {asked:g}: a time scale is for the simulator only; "
                         f"a real {engine_option} server always runs at 1")


def resolve_time_scale(asked: float | None, *, engine: EngineId | None, lab: Lab | None, variants: tuple[str, ...],
                       plan: Plan, sequential: bool = False) -> TimeScale:
    """The run's S. ``asked`` is ``--time-scale`` (None: auto); ``engine`` is the engine speclab
    launches ("sim", "vllm"), None when it launches nothing (attached servers)."""
    if engine is None or lab is None:
        if asked is not None and asked != 1.0:
            raise InputError(f"--time-scale {asked:g}: speclab starts no simulator here (attached servers run "
                             "at their own pace); start the simulator with --sim-time-scale instead")
        return TimeScale(1.0, "attached servers")
    if not backend(engine).simulated:
        if asked is not None and asked != 1.0:
            raise InputError(f"--time-scale {asked:g}: a time scale is for the simulator only; "
                             f"a real {engine} server always runs at 1")
        return TimeScale(1.0, "real servers run at 1")
    if asked is not None:
        return TimeScale(asked, "given with --time-scale")
    loads = planned_loads(lab, variants, plan)
    if sequential and loads:  # one simulator at a time carries the load
        heaviest = max(loads, key=lambda load: load.weight)
        scale, reason = auto_time_scale([heaviest])
        return TimeScale(scale, reason + " (variants one after another)")
    scale, reason = auto_time_scale(loads)
    return TimeScale(scale, reason)
