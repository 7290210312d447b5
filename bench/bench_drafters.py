"""Acceptance length per drafter, temperature and rejection method on the simulator, per prompt class.

For sim-8b with every bundled drafter (sim-1b and sim-0.5b draft models, the misaligned draft, the
EAGLE / EAGLE-3 / MTP heads, n-gram and suffix lookup) at k=4, it prints the acceptance length
(1 + accepted / verify steps) over the bundled prompts at T=0 and T=1 (three seeds each), per class
and overall, with greedy drafting (vLLM's default) and probabilistic drafting, and under block
verification. Everything is modelled and in-process: the figures do not depend on this host.

    .venv/bin/python bench/bench_drafters.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from speclab.sim.api import EngineConfig, EngineRequest, SamplingParams, SpecConfig
from speclab.sim.engine import build_engine

PROMPTS = Path(__file__).resolve().parents[1] / "speclab" / "bundled" / "scenarios" / "prompts"
CLASSES = ("factual_qa", "tool_call", "refusal", "long_continuation")
DRAFTERS = {
    "sim-1b draft": SpecConfig("draft_model", 4, "sim-1b"),
    "sim-0.5b draft": SpecConfig("draft_model", 4, "sim-0.5b"),
    "sim-1b-misaligned": SpecConfig("draft_model", 4, "sim-1b-misaligned"),
    "eagle head": SpecConfig("eagle", 4, "head"),
    "eagle3 head": SpecConfig("eagle3", 4, "head"),
    "mtp module": SpecConfig("mtp", 4),
    "ngram 2-4": SpecConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4),
    "suffix": SpecConfig("suffix", 4),
}


def acceptance(spec: SpecConfig, temperature: float, seeds: int) -> dict[str, float]:
    engine = build_engine(EngineConfig("sim-8b", speculative=spec, max_num_seqs=256))
    tok = engine.tokenizer
    classes: dict[str, str] = {}
    for seed in range(seeds):
        for cls in CLASSES:
            for i, line in enumerate((PROMPTS / f"{cls}.jsonl").read_text().splitlines()):
                item = json.loads(line)
                rid = f"{cls}-{i}-{seed}"
                params = SamplingParams(max_tokens=item["max_tokens"], temperature=temperature, seed=seed * 1000 + i)
                engine.add_request(EngineRequest(rid, tok.encode(tok.apply_chat_template(item["messages"])), params, 0.0))
                classes[rid] = cls
    totals: dict[str, list[int]] = {c: [0, 0] for c in (*CLASSES, "all")}
    now = 0.0
    while engine.has_unfinished():
        step = engine.step(now)
        now += step.duration
        for out in step.outputs:
            if out.finished and out.spec is not None:
                for key in (classes[out.request_id], "all"):
                    totals[key][0] += out.spec.steps
                    totals[key][1] += out.spec.accepted
    return {c: (1 + a / s if s else float("nan")) for c, (s, a) in totals.items()}


def table(title: str, specs: dict[str, SpecConfig]) -> None:
    print(f"\n{title}")
    print(f"{'drafter':<18} {'T':>3} " + " ".join(f"{c[:12]:>12}" for c in (*CLASSES, "all")))
    for name, spec in specs.items():
        for temperature, seeds in ((0.0, 1), (1.0, 3)):
            row = acceptance(spec, temperature, seeds)
            print(f"{name:<18} {temperature:>3.0f} " + " ".join(f"{row[c]:>12.2f}" for c in (*CLASSES, "all")),
                  flush=True)


def main() -> int:
    table("acceptance length at k=4, greedy drafting (vLLM 0.33's default), standard verification", DRAFTERS)
    probabilistic = {n: SpecConfig(s.method, s.num_speculative_tokens, s.model, draft_sample_method="probabilistic")
                     for n, s in DRAFTERS.items() if n in ("sim-1b draft", "eagle3 head")}
    table("the same with draft_sample_method = probabilistic", probabilistic)
    block = {n: SpecConfig(s.method, s.num_speculative_tokens, s.model, rejection_sample_method="block",
                           draft_sample_method="probabilistic") for n, s in probabilistic.items()}
    table("block verification, probabilistic drafting", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
