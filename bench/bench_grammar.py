"""What constrained decoding costs per token on this machine, beside what the model itself costs.

For every tool-call prompt speclab ships (its JSON schema as a ``response_format``) and for a
json_object, a regex, a choice and a Lark grammar, it decodes greedily from sim-8b's scores
masked by the grammar until the grammar accepts EOS, and times each grammar operation the engine
will call on that path: the next-token mask (llguidance's bitmask, then unpacked to booleans over
the vocabulary), consuming the chosen token, validating a 4-token draft run, the 5 verification
masks of a 4-token draft step, and applying a mask to the scores. Beside them: sim-8b's own
scoring per token, and compiling a constraint (first time, and a copy from the cache).

    .venv/bin/python bench/bench_grammar.py [--model sim-8b] [--repeat 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from speclab.sim.grammar import GrammarCompiler, GrammarSpec, apply_mask, spec_from_request, unpack_bitmask
from speclab.sim.lm import SimLM, load_lm

PROMPTS = Path(__file__).resolve().parents[1] / "speclab" / "bundled" / "scenarios" / "prompts" / "tool_call.jsonl"
OTHERS: list[tuple[str, dict[str, Any], str]] = [
    ("json_object", {"response_format": {"type": "json_object"}}, "Reply with one JSON object."),
    ("regex", {"structured_outputs": {"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}}, "What is the date?"),
    ("choice", {"structured_outputs": {"choice": ["positive", "negative", "neutral"]}}, "Sentiment?"),
    ("grammar", {"structured_outputs": {"grammar": 'start: expr\nexpr: term (("+" | "-") term)*\nterm: /[0-9]{1,3}/'}},
     "Write a sum."),
]


def _timed(samples: dict[str, list[float]], name: str, fn: Callable[..., Any], *args: Any) -> Any:
    start = time.perf_counter_ns()
    out = fn(*args)
    samples[name].append((time.perf_counter_ns() - start) / 1000.0)
    return out


def decode(lm: SimLM, compiler: GrammarCompiler, spec: GrammarSpec, prompt: list[int], max_tokens: int,
           samples: dict[str, list[float]]) -> list[int]:
    """Greedy decoding under the grammar, timing the plain path's operations; returns the answer's tokens."""
    matcher = compiler.compile(spec)
    state = lm.state(prompt)
    out: list[int] = []
    while not matcher.is_terminated() and len(out) < max_tokens:
        bits = _timed(samples, "bitmask", matcher.bitmask)
        mask = _timed(samples, "unpack to bool", unpack_bitmask, bits, matcher.vocab_size)
        scores = _timed(samples, "model scores", lm.scores, state)
        _timed(samples, "apply mask", apply_mask, scores, mask)
        token = int(np.argmax(scores))
        ok = _timed(samples, "consume", matcher.accept, [token])
        assert ok, matcher.error
        out.append(token)
        state.push(token)
    return out


def speculate(compiler: GrammarCompiler, spec: GrammarSpec, path: list[int], k: int,
              samples: dict[str, list[float]]) -> None:
    """At every position of a decoded answer, the next ``k`` tokens as drafts: time their checks."""
    matcher = compiler.compile(spec)
    for i, token in enumerate(path[:-1]):
        drafts = path[i: i + k]
        n = _timed(samples, f"validate {k} drafts", matcher.validate, drafts)
        _timed(samples, f"verification masks k={k}", matcher.verification_masks, drafts[:n])
        matcher.accept([token])


def _row(name: str, values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
    return f"  {name:<26} median {statistics.median(values):8.1f} µs   mean {statistics.fmean(values):8.1f}   " \
           f"p99 {p99:8.1f}   n={len(values)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sim-8b")
    parser.add_argument("--repeat", type=int, default=3, help="decode every prompt this many times")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    lm = load_lm(args.model)
    tok = lm.tokenizer
    jobs: list[tuple[str, GrammarSpec, list[int]]] = []
    for line in PROMPTS.read_text().splitlines():
        case = json.loads(line)
        spec = spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
            "name": "tool_call", "schema": case["schema"], "strict": True}}}, chat=True)
        assert spec is not None
        jobs.append(("tool_call schema", spec, tok.encode(tok.apply_chat_template(case["messages"]))))
    for name, body, question in OTHERS:
        spec = spec_from_request(body, chat=True)
        assert spec is not None
        jobs.append((name, spec, tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))))

    compile_samples: dict[str, list[float]] = defaultdict(list)
    for _, spec, _ in jobs:
        fresh = GrammarCompiler(tok)
        _timed(compile_samples, "compile (first)", fresh.compile, spec)
        for _ in range(20):
            _timed(compile_samples, "compile (cached copy)", fresh.compile, spec)

    compiler = GrammarCompiler(tok)
    per_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    tokens: dict[str, int] = defaultdict(int)
    for _ in range(args.repeat):
        for name, spec, prompt in jobs:
            path = decode(lm, compiler, spec, prompt, args.max_tokens, per_kind[name])
            speculate(compiler, spec, path, 4, per_kind[name])
            tokens[name] += len(path)

    print(f"grammar operations on {args.model} (vocabulary {tok.vocab_size} tokens), llguidance, one core")
    for name, values in compile_samples.items():
        print(_row(name, values))
    everything: dict[str, list[float]] = defaultdict(list)
    for name, samples in per_kind.items():
        print(f"{name}: {tokens[name]} tokens decoded")
        for op, values in samples.items():
            print(_row(op, values))
            everything[op] += values
    print("all constraints:")
    for op, values in everything.items():
        print(_row(op, values))
    grammar = sum(statistics.fmean(everything[op]) for op in ("bitmask", "unpack to bool", "apply mask", "consume"))
    model = statistics.fmean(everything["model scores"])
    print(f"per plain decoded token (means): bitmask + unpack + apply + consume {grammar:.1f} µs vs the model's "
          f"scores {model:.1f} µs (ratio {grammar / model:.2f})")


if __name__ == "__main__":
    main()
