"""One open-loop plan for every client bench_loadgen compares: a scenario file speclab runs as a user
would, and the same schedule and bodies written out for the plain clients.

The scenario is Poisson arrivals at a fixed seed with 32-word prompts and 64 output tokens.
speclab's request ``i`` and its send offset depend on the seed and ``i`` only (the scenario's name
goes into the request ids), so each run gets its own name, hence its own ids, and the same
schedule; ``same_schedule`` checks that on what speclab recorded.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclab.model.scenario import load_scenario
from speclab.traffic import build_plan

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_VOCAB = ("river", "stone", "market", "lantern", "harbour", "winter", "engine", "garden", "letter", "window",
          "mountain", "signal", "orchard", "bridge", "candle", "silver", "paper", "forest", "station", "cloud",
          "valley", "mirror", "thunder", "meadow", "copper", "island", "whisper", "canyon", "ribbon", "falcon")
PROMPT_COUNT = 16


@dataclass(frozen=True)
class Workload:
    rate: float
    duration_s: float
    seed: int = 7
    endpoint: str = "completions"
    max_tokens: int = 64
    prompt_words: int = 32


def prompts(words: int, count: int = PROMPT_COUNT, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_VOCAB) for _ in range(words)) for _ in range(count)]


def write_scenario(path: Path, name: str, work: Workload) -> Path:
    """A scenario file of ``work`` under ``name`` (which becomes the request ids' prefix)."""
    quoted = ",\n  ".join(json.dumps(p) for p in prompts(work.prompt_words))
    path.write_text(
        f'name = "{name}"\n'
        f'description = "bench_loadgen: Poisson {work.rate:g} req/s, {work.prompt_words}-word prompts"\n'
        f"seed = {work.seed}\n"
        f"duration_s = {work.duration_s:g}\n"
        f'endpoint = "{work.endpoint}"\n'
        "stall_timeout_s = 30\n\n"
        "[arrival]\n"
        'process = "poisson"\n'
        f"rate = {work.rate:g}\n\n"
        "[classes.bench]\n"
        "temperature = 0\n"
        f"max_tokens = {work.max_tokens}\n"
        f"prompts = [\n  {quoted},\n]\n"
    )
    return path


def planned(scenario: Path) -> list[tuple[float, Any]]:
    """(offset, PlannedRequest) of every request the scenario plans, by speclab's own planner."""
    return build_plan(load_scenario(scenario)).offsets()


def body(request: Any, model: str) -> dict[str, Any]:
    """The body speclab sends for ``request``: same fields, same stream options."""
    out: dict[str, Any] = {"model": model}
    if request.endpoint == "chat":
        out["messages"] = request.messages
    else:
        out["prompt"] = request.prompt
    out.update(request.sampling)
    out["stream"] = True
    out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    out["return_token_ids"] = True
    return out


def write_plain_plan(path: Path, scenario: Path, model: str, endpoint: str) -> int:
    """The plain clients' plan file: offsets, ids and encoded bodies; returns the request count."""
    rows = [[offset, req.request_id, json.dumps(body(req, model))] for offset, req in planned(scenario)]
    path.write_text(json.dumps({"path": PATHS[endpoint], "requests": rows}))
    return len(rows)


def same_schedule(offsets: list[float], recorded: dict[int, float]) -> float:
    """Largest gap between planned offsets and the intended times a client recorded (index → run-clock
    time), after aligning request 0; infinity if request 0 was not recorded."""
    if 0 not in recorded:
        return float("inf")
    origin = recorded[0] - offsets[0]
    return max((abs(t - origin - offsets[i]) for i, t in recorded.items() if i < len(offsets)), default=0.0)
