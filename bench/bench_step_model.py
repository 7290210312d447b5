"""The simulator's step-time model against the published vLLM H100 fit, and where k stops paying.

Prints, for sim-8b (Llama-3.1-8B) on the chosen GPU profile:
1. step times for batch 1-256 and k = 0, 2, 4 (verify steps, overhead included) beside the fit
   (SpecDecode-Bench ``Llama8BH100``; rows above 64 extrapolate it) with model ÷ fit;
2. the draft passes: a 1B draft model's pass against the published 37.5% of the target's pass,
   and an EAGLE-3 proposal (3 passes) against the published proposal fit;
3. the break-even acceptance length per batch for sim-8b + sim-1b at k = 2 and 4 (the acceptance
   at which k stops paying), and the crossover batch at Spec-Bench's draft-model average (2.2);
4. the acceptance the simulator measures on sim-8b per bundled draft (sim-1b, sim-0.5b, the EAGLE,
   EAGLE-3 and MTP heads, n-gram and suffix lookup) at k = 2 and 4 on the bundled prompts (T=0),
   each draft's break-even by the engine's own step model for it, and the crossover batch and the
   speed-up at the measured acceptance, at the fit's 1,024-token context and at the prompts' own;
5. closed-loop TPOT on the modelled clock (the default lab's settings) at concurrency 1, 8, 32, 64:
   the k=2 and k=4 speed-ups, with the running batch and acceptance measured.
All figures are modelled time; nothing here depends on this host's speed.

    .venv/bin/python bench/bench_step_model.py [--gpu H100 | --profile FILE] [--context 1024]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speclab.sim import breakeven
from speclab.sim.api import EngineConfig, SamplingParams, SpecConfig
from speclab.sim.closed_loop import Prompt, run_closed_loop
from speclab.sim.engine import build_engine
from speclab.sim.gpu_profile_file import load_gpu_profile
from speclab.sim.hardware import GpuProfile, gpu_profile
from speclab.sim.published_fit import (
    DRAFT_TO_TARGET_PASS,
    EAGLE_PROPOSAL_PASSES,
    LLAMA_8B_H100,
    RATIO_CONTEXT,
)
from speclab.sim.shapes import MODEL_SHAPES, eagle_head
from speclab.sim.timing import StepTimeModel, StepWork

PROMPTS = Path(__file__).resolve().parents[1] / "speclab" / "bundled" / "scenarios" / "prompts"
CLASSES = ("factual_qa", "tool_call", "refusal", "long_continuation")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SPEC_BENCH_DRAFT_MODEL_TAU = 2.2  # Spec-Bench leaderboard, draft model (SpS): 2.19 mean accepted tokens


def bundled_prompts() -> list[Prompt]:
    out: list[Prompt] = []
    for cls in CLASSES:
        for line in (PROMPTS / f"{cls}.jsonl").read_text().splitlines():
            item = json.loads(line)
            out.append((item["messages"], SamplingParams(max_tokens=item["max_tokens"], temperature=0)))
    return out


def fit_step_table(gpu: GpuProfile, context: int) -> None:
    model = StepTimeModel(gpu, MODEL_SHAPES["sim-8b"])
    print(f"\n1. sim-8b step times on {gpu.name}, {context} tokens of context per sequence (ms; fit rows >64 extrapolate)")
    print(f"{'batch':>6} " + " ".join(f"{'k=' + str(k) + ' model':>12} {'fit':>8} {'ratio':>6}" for k in (0, 2, 4))
          + f" {'k4/k0':>6}")
    worst = 1.0
    for b in BATCHES:
        cells, steps = [], {}
        for k in (0, 2, 4):
            modelled = breakeven.step_seconds(model, b, context, k)
            fit = LLAMA_8B_H100.step(b * context, b * (1 + k))
            steps[k] = modelled
            if b <= 64:
                worst = max(worst, abs(modelled / fit - 1) + 1)
            cells.append(f"{modelled * 1e3:12.2f} {fit * 1e3:8.2f} {modelled / fit:6.3f}")
        print(f"{b:>6} " + " ".join(cells) + f" {steps[4] / steps[0]:6.2f}")
    print(f"   largest |model/fit - 1| at batch 1-64: {worst - 1:.4f} (target: every ratio within 0.9-1.1)")


def draft_pass_table(gpu: GpuProfile) -> None:
    target = MODEL_SHAPES["sim-8b"]
    print(f"\n2. draft passes on {gpu.name} (batch 1, {RATIO_CONTEXT} tokens of context)")
    t_pass = StepTimeModel(gpu, target).target.time(1, RATIO_CONTEXT)
    for name in ("sim-1b", "sim-0.5b"):
        d = StepTimeModel(gpu, target, MODEL_SHAPES[name]).draft
        assert d is not None
        share = d.time(1, RATIO_CONTEXT) / t_pass
        print(f"   {name:8} ({MODEL_SHAPES[name].stands_for}): pass {d.time(1, RATIO_CONTEXT) * 1e3:.2f} ms = "
              f"{share:.1%} of the 8B pass ({t_pass * 1e3:.2f} ms); ÷ published {DRAFT_TO_TARGET_PASS:.1%}: "
              f"{share / DRAFT_TO_TARGET_PASS:.2f}  (fixed part {d.fixed_s * 1e3:.2f} ms)")
    head = StepTimeModel(gpu, target, eagle_head(target, "eagle3"), head=True)
    print(f"   EAGLE-3 proposal ({EAGLE_PROPOSAL_PASSES} passes) against the published proposal fit:")
    for b in (1, 8, 32, 64):
        modelled = head.draft_time(StepWork(draft_passes=EAGLE_PROPOSAL_PASSES, draft_batch=b,
                                            draft_kv_tokens=b * RATIO_CONTEXT))
        published = LLAMA_8B_H100.eagle_proposal(b * RATIO_CONTEXT, b * EAGLE_PROPOSAL_PASSES)
        print(f"     batch {b:>3}: model {modelled * 1e3:.2f} ms, published {published * 1e3:.2f} ms, "
              f"ratio {modelled / published:.3f}")


def break_even_table(model: StepTimeModel, context: int) -> None:
    print(f"\n3. break-even acceptance length, sim-8b + sim-1b, {context} tokens of context "
          "(k pays while the acceptance length exceeds it)")
    print(f"{'batch':>6} {'k=2':>6} {'k=4':>6}")
    for b in breakeven.BATCHES:
        print(f"{b:>6} {breakeven.break_even(model, b, context, 2):6.2f} {breakeven.break_even(model, b, context, 4):6.2f}")
    tau = SPEC_BENCH_DRAFT_MODEL_TAU
    for k in (2, 4):
        print(f"   crossover at acceptance length {tau} (Spec-Bench draft-model average), k={k}: "
              f"{_crossover_text(breakeven.crossover(model, tau, context, k))}")
    lo, hi = (breakeven.acceptance_for_crossover(model, b, context, 4) for b in (32, 96))
    print(f"   the k=4 crossover lands in 32-96 for acceptance lengths {lo:.2f}-{hi:.2f}")


def _crossover_text(batch: int | None) -> str:
    if batch is None:
        return f"none up to batch {breakeven.BATCHES[-1]} (k pays throughout)"
    if batch == breakeven.BATCHES[0]:
        return "batch 1 (k does not pay at any batch)"
    return f"batch {batch}"


DRAFTS: dict[str, Callable[[int], SpecConfig]] = {
    "sim-1b": lambda k: SpecConfig("draft_model", k, "sim-1b"),
    "sim-0.5b": lambda k: SpecConfig("draft_model", k, "sim-0.5b"),
    "eagle head": lambda k: SpecConfig("eagle", k, "head"),
    "eagle3 head": lambda k: SpecConfig("eagle3", k, "head"),
    "mtp": lambda k: SpecConfig("mtp", k),
    "ngram 2-4": lambda k: SpecConfig("ngram", k, prompt_lookup_min=2, prompt_lookup_max=4),
    "suffix": lambda k: SpecConfig("suffix", k),
}


@dataclass(frozen=True)
class Measured:
    draft: str
    k: int
    tau: float
    model: StepTimeModel  # the engine's own step model for this draft (head, draft model or lookup)
    lookup: bool


def measured_acceptance(gpu: GpuProfile, prompts: list[Prompt]) -> tuple[list[Measured], float]:
    rows: list[Measured] = []
    contexts: list[float] = []
    for name, spec_for in DRAFTS.items():
        for k in (2, 4):
            config = EngineConfig("sim-8b", gpu_profile=gpu, speculative=spec_for(k))
            result = run_closed_loop(config, prompts, 1, len(prompts))
            lookup = spec_for(k).method in ("ngram", "suffix")
            rows.append(Measured(name, k, result.acceptance_length, build_engine(config).timer, lookup))
            contexts += result.decode_context
    return rows, statistics.fmean(contexts)


def crossover_at_measured(rows: list[Measured], prompt_context: float) -> None:
    print("\n4. the simulator's measured acceptance per draft on sim-8b, bundled prompts at T=0 (one in flight), "
          "and where k stops paying by the model")
    contexts = (1024, round(prompt_context))
    print(f"   contexts: the fit's 1,024 tokens and the prompts' own mean decode context ({contexts[1]})")
    print(f"{'draft':<12} {'k':>2} {'tau':>5} | {'break-even b1/64/256 @1024':>27} | {'crossover @1024':>15} "
          f"{'@' + str(contexts[1]):>7} | {'speed-up b1/64/256 @1024':>25} | {'@' + str(contexts[1]):>18}")
    for row in rows:
        m, k, tau, lk = row.model, row.k, row.tau, row.lookup
        be = "/".join(f"{breakeven.break_even(m, b, 1024, k, lk):.2f}" for b in (1, 64, 256))
        cross = [breakeven.crossover(m, tau, c, k, lookup=lk) for c in contexts]
        ups = ["/".join(f"{breakeven.speedup(m, b, c, k, tau, lk):.2f}" for b in (1, 64, 256)) for c in contexts]
        print(f"{row.draft:<12} {k:>2} {tau:5.2f} | {be:>27} | {_crossover_cell(cross[0]):>15} "
              f"{_crossover_cell(cross[1]):>7} | {ups[0]:>25} | {ups[1]:>18}")
    print("   crossover: the smallest batch where k no longer pays at that tau; '1' = never pays, '-' = pays to 256")


def _crossover_cell(batch: int | None) -> str:
    return "-" if batch is None else str(batch)


def closed_loop_table(gpu: GpuProfile, prompts: list[Prompt], concurrencies: tuple[int, ...]) -> None:
    print("\n5. closed loop on the modelled clock, default lab settings (max_num_seqs 64, max_model_len 4096)")
    print("   speed-up: mean TPOT over requests (median request's in brackets) against k=0")
    print(f"{'conc':>5} {'k0 TPOT ms':>11} {'run':>5} | {'k2 TPOT':>8} {'speed-up':>15} {'tau':>5} | "
          f"{'k4 TPOT':>8} {'speed-up':>15} {'tau':>5} {'run':>5}")
    for c in concurrencies:
        row = {}
        for k in (0, 2, 4):
            spec = SpecConfig("draft_model", k, "sim-1b") if k else None
            config = EngineConfig("sim-8b", gpu_profile=gpu, max_num_seqs=64, max_model_len=4096, speculative=spec)
            row[k] = run_closed_loop(config, prompts, c, max(4 * c, len(prompts)))
        base, base_median = row[0].mean_tpot_s, statistics.median(row[0].tpot_s)
        print(f"{c:>5} {base * 1e3:11.2f} {row[0].mean_running:5.1f} | "
              + " | ".join(f"{row[k].mean_tpot_s * 1e3:8.2f} {base / row[k].mean_tpot_s:6.2f}x "
                           f"({base_median / statistics.median(row[k].tpot_s):5.2f}x) "
                           f"{row[k].acceptance_length:5.2f}" for k in (2, 4))
              + f" {row[4].mean_running:5.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--profile", help="a GPU profile file (bench/calibrate_gpu.py output)")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--no-engine", action="store_true", help="model tables only (skip sections 4 and 5)")
    args = parser.parse_args(argv)
    gpu = load_gpu_profile(args.profile) if args.profile else gpu_profile(args.gpu)
    print(f"GPU profile {gpu.name}: {gpu.source}")
    print("   " + ", ".join(f"{k}={v:.4g}" for k, v in gpu.as_dict().items() if isinstance(v, float)))
    pair = StepTimeModel(gpu, MODEL_SHAPES["sim-8b"], MODEL_SHAPES["sim-1b"])
    fit_step_table(gpu, args.context)
    draft_pass_table(gpu)
    break_even_table(pair, args.context)
    if not args.no_engine:
        prompts = bundled_prompts()
        rows, prompt_context = measured_acceptance(gpu, prompts)
        crossover_at_measured(rows, prompt_context)
        closed_loop_table(gpu, prompts, tuple(int(c) for c in args.concurrency.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
