"""How fast the simulator's engine core steps on this machine, against its own modelled time.

For 1, 32 and 256 sequences in flight (baseline, a 4-token sim-1b draft and n-gram lookup on
sim-8b; greedy, T=0.8, and T=0.8 with top-p 0.9 / top-k 50), it prints engine steps/s, generated
tokens/s, and wall time per step beside modelled time per step: when wall exceeds modelled, a
server on this host would fall behind its model (clock drift).

``--inflight N`` steps only the load ``bench_sim.py`` puts on one simulator (sim-8b with a 4-token
sim-1b draft, its one prompt, 64 tokens, T=1, EOS ignored) at N in flight, ``--runs`` times,
printing each run's wall time per step; ``--steps`` sets the steps a run times after 20 warm-up
steps. In both modes the garbage collector runs as in the simulator's engine process
(``speclab.sim.step_gc``: between steps, outside the timed part).

    .venv/bin/python bench/bench_sim_engine.py
    .venv/bin/python bench/bench_sim_engine.py --inflight 64 --steps 150 --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from speclab.sim.api import EngineConfig, EngineRequest, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine
from speclab.sim.step_gc import StepCollector

SIM_BENCH_PROMPT = "Write a long story about a lighthouse keeper."  # bench_sim.py's prompt
PROMPTS = Path(__file__).resolve().parents[1] / "speclab" / "bundled" / "scenarios" / "prompts"


def prompts() -> list[list[dict[str, str]]]:
    out = []
    for cls in ("tool_call", "long_continuation", "refusal", "factual_qa"):
        out += [json.loads(line)["messages"] for line in (PROMPTS / f"{cls}.jsonl").read_text().splitlines()]
    return out


def bench(config: EngineConfig, inflight: int, steps: int, temperature: float, top_p: float = 1.0,
          top_k: int = -1, *, sim_load: bool = False, warmup: int = 5) -> dict[str, float]:
    """``sim_load``: bench_sim.py's requests (its one prompt, 64 tokens, EOS ignored) instead of the
    bundled chat prompts at 128 tokens."""
    engine = build_engine(config)
    tok = engine.tokenizer
    if sim_load:
        encoded = [tok.encode(SIM_BENCH_PROMPT)]
    else:
        encoded = [tok.encode(tok.apply_chat_template(m)) for m in prompts()]
    counter = 0

    def top_up() -> None:
        nonlocal counter
        while len(engine._seqs) < inflight:
            params = SamplingParams(max_tokens=64 if sim_load else 128, temperature=temperature, top_p=top_p,
                                    top_k=top_k, seed=counter, ignore_eos=sim_load)
            engine.add_request(EngineRequest(str(counter), encoded[counter % len(encoded)], params, 0.0))
            counter += 1

    now, tokens, wall, modelled = 0.0, 0, 0.0, 0.0
    collector = StepCollector()
    collector.start()
    try:
        for i in range(steps + warmup):
            top_up()
            start = time.perf_counter()
            result = engine.step(now)
            elapsed = time.perf_counter() - start
            collector.after_step()
            if i >= warmup:  # skip the prefill burst
                wall += elapsed
                tokens += result.stats.generation_tokens
                modelled += result.duration
            now += result.duration
    finally:
        collector.stop()
    return {"steps_per_s": steps / wall, "tokens_per_s": tokens / wall,
            "wall_ms_per_step": 1000 * wall / steps, "modelled_ms_per_step": 1000 * modelled / steps}


def run_sim_load(inflight: int, steps: int, runs: int) -> None:
    config = EngineConfig("sim-8b", max_num_seqs=256, speculative=SpecConfig("draft_model", 4, "sim-1b"))
    walls = []
    for run in range(runs):
        r = bench(config, inflight, steps, 1.0, sim_load=True, warmup=20)
        walls.append(r["wall_ms_per_step"])
        print(f"run {run + 1}: {inflight} in flight, wall {r['wall_ms_per_step']:.2f} ms a step, "
              f"modelled {r['modelled_ms_per_step']:.2f} ms ({r['wall_ms_per_step'] / r['modelled_ms_per_step']:.2f})")
    print(f"median wall {statistics.median(walls):.2f} ms a step over {runs} runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inflight", type=int, help="only bench_sim.py's load, at this many in flight")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    if (a.inflight is not None and a.inflight < 1) or a.steps < 1 or a.runs < 1:
        ap.error("--inflight, --steps and --runs must be at least 1")
    if a.inflight is not None:
        run_sim_load(a.inflight, a.steps, a.runs)
        return
    variants = {"baseline": None, "draft k=4": SpecConfig("draft_model", 4, "sim-1b"),
                "ngram k=4": SpecConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4)}
    print(f"{'variant':<11} {'sampling':<14} {'seqs':>5} {'steps/s':>8} {'tok/s':>8} {'wall ms':>8} {'model ms':>9}")
    for temperature, top_p, top_k in ((0.0, 1.0, -1), (0.8, 1.0, -1), (0.8, 0.9, 50)):
        label = f"T={temperature}" + (f" p{top_p} k{top_k}" if top_p < 1.0 else "")
        for name, spec in variants.items():
            for inflight, steps in ((1, 200), (32, 60), (256, 20)):
                r = bench(EngineConfig("sim-8b", speculative=spec), inflight, steps, temperature, top_p, top_k)
                print(f"{name:<11} {label:<14} {inflight:>5} {r['steps_per_s']:>8.1f} {r['tokens_per_s']:>8.0f} "
                      f"{r['wall_ms_per_step']:>8.2f} {r['modelled_ms_per_step']:>9.2f}")


if __name__ == "__main__":
    main()
