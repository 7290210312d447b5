"""Drive an engine closed-loop on a virtual clock: N requests in flight, each replaced when it ends.

No server, no sockets, no wall clock: the engine's modelled step durations advance the clock, so
the figures are the step model's and the scheduler's alone. Used by the step-model benchmark and
the tests to read TPOT, acceptance and running batch at a fixed concurrency.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from .api import EngineConfig, EngineRequest, SamplingParams
from .engine import build_engine

Prompt = tuple[list[dict[str, str]], SamplingParams]


@dataclass(slots=True)
class ClosedLoopResult:
    tpot_s: list[float] = field(default_factory=list)  # per finished request with 2+ tokens
    running: list[int] = field(default_factory=list)  # running sequences per step
    decode_context: list[float] = field(default_factory=list)  # per request: prompt + half its output
    steps: int = 0
    accepted: int = 0
    verify_steps: int = 0
    clock_s: float = 0.0

    @property
    def mean_tpot_s(self) -> float:
        return statistics.fmean(self.tpot_s)

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.accepted / self.verify_steps if self.verify_steps else 1.0

    @property
    def mean_running(self) -> float:
        return statistics.fmean(self.running) if self.running else 0.0


def run_closed_loop(config: EngineConfig, prompts: Sequence[Prompt], concurrency: int, requests: int) -> ClosedLoopResult:
    """Send ``requests`` requests, ``concurrency`` at a time, cycling through ``prompts``."""
    engine = build_engine(config)
    tok = engine.tokenizer
    encoded = [tok.encode(tok.apply_chat_template(messages)) for messages, _ in prompts]
    result = ClosedLoopResult()
    counts: dict[str, int] = {}
    sent = 0

    def send(now: float) -> None:
        nonlocal sent
        i = sent % len(prompts)
        engine.add_request(EngineRequest(f"r{sent}", list(encoded[i]), prompts[i][1], now))
        counts[f"r{sent}"] = 0
        sent += 1

    for _ in range(min(concurrency, requests)):
        send(0.0)
    now = 0.0
    while engine.has_unfinished():
        step = engine.step(now)
        now += step.duration
        result.steps += 1
        result.running.append(step.stats.running)
        for out in step.outputs:
            counts[out.request_id] = counts.get(out.request_id, 0) + len(out.new_token_ids)
            if not out.finished:
                continue
            times, n = out.times, counts.pop(out.request_id)
            result.decode_context.append(out.prompt_tokens + n / 2)
            if times and times.first_token is not None and times.last_token is not None and n > 1:
                result.tpot_s.append((times.last_token - times.first_token) / (n - 1))
            if out.spec is not None:
                result.accepted += out.spec.accepted
                result.verify_steps += out.spec.steps
            if sent < requests:
                send(now)
    result.clock_s = now
    return result
