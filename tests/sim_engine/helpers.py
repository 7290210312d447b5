"""Shared drivers for the engine tests: run requests to completion on a virtual clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclab.sim.api import EngineConfig, EngineRequest, RequestOutput, SamplingParams, StepStats
from speclab.sim.engine import SimEngine, build_engine

PROMPTS = Path(__file__).resolve().parents[2] / "speclab" / "bundled" / "scenarios" / "prompts"
GOLDEN = PROMPTS.parent / "golden"
CLASSES = ("factual_qa", "tool_call", "refusal", "long_continuation")


def load_lines(folder: Path, cls: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / f"{cls}.jsonl").read_text().splitlines() if line.strip()]


@dataclass
class Run:
    engine: SimEngine
    tokens: dict[str, list[int]] = field(default_factory=dict)
    finished: dict[str, RequestOutput] = field(default_factory=dict)
    stats: list[StepStats] = field(default_factory=list)
    clock: float = 0.0

    def text(self, rid: str) -> str:
        return self.engine.tokenizer.decode(self.tokens[rid])


def add(engine: SimEngine, rid: str, messages: list[dict[str, str]], params: SamplingParams,
        at: float = 0.0) -> None:
    tok = engine.tokenizer
    engine.add_request(EngineRequest(rid, tok.encode(tok.apply_chat_template(messages)), params, at))


def drain(engine: SimEngine, now: float = 0.0, max_steps: int = 100_000) -> Run:
    run = Run(engine, clock=now)
    for _ in range(max_steps):
        if not engine.has_unfinished():
            break
        result = engine.step(run.clock)
        run.clock += result.duration
        run.stats.append(result.stats)
        for out in result.outputs:
            run.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finished:
                run.finished[out.request_id] = out
    return run


def run_prompts(config: EngineConfig, items: list[tuple[str, list[dict[str, str]], SamplingParams]]) -> Run:
    engine = build_engine(config)
    for rid, messages, params in items:
        add(engine, rid, messages, params)
    return drain(engine)


def bundled_items(temperature: float = 0.0) -> list[tuple[str, list[dict[str, str]], SamplingParams]]:
    items = []
    for cls in CLASSES:
        for i, line in enumerate(load_lines(PROMPTS, cls)):
            params = SamplingParams(max_tokens=line["max_tokens"], temperature=temperature)
            items.append((f"{cls}-{i}", line["messages"], params))
    return items
