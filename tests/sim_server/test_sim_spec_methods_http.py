"""vLLM 0.33's knobs over HTTP: a simulator process honours the k schedule and synthetic acceptance.

The per-request ``metrics.speculative_decoding`` (``detailed``) reports the drafts each verify step
really made, so a schedule that says k=1 at 4+ in flight shows 1-draft steps while many run and
4-draft steps alone; ``synthetic_acceptance_length`` 2.0 is vLLM's minimum-variance schedule, one
accepted draft every step. Keys the simulator does not model are named in a start-up warning.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from .conftest import start_sim
from .sse import get, post_json

PROMPT = [{"role": "user", "content": "Continue the story: Milo was a street musician who lived in a port town."}]


def spec_args(spec: dict[str, Any]) -> list[str]:
    return ["sim-8b", "--speculative-config", json.dumps(spec), "--enable-per-request-metrics",
            "--per-request-spec-decode-metrics", "detailed", "--max-num-seqs", "16"]


async def ask(url: str, max_tokens: int = 96) -> dict[str, Any]:
    status, body = await post_json(url + "/v1/chat/completions",
                                   {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0})
    assert status == 200, body
    sd: dict[str, Any] = body["metrics"]["speculative_decoding"]
    return sd


def counter_total(metrics: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}_total\{{[^}}]*\}} (\S+)$", metrics, re.M))


async def test_the_schedule_picks_k_by_the_running_batch(tmp_path: Path) -> None:
    schedule = [[1, 1, 4], [2, 3, 2], [4, 1024, 1]]
    p = start_sim(spec_args({"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 4,
                             "num_speculative_tokens_per_batch_size": schedule}), tmp_path, "schedule")
    try:
        alone = await ask(p.url)
        many = await asyncio.gather(*(ask(p.url) for _ in range(8)))
        _, metrics = await get(p.url + "/metrics")
    finally:
        p.stop()
    assert alone["num_spec_tokens"] == 4 and len(alone["acceptance_histogram"]) == 5
    assert set(alone["per_step_drafted"]) == {4}
    drafted = Counter(k for sd in many for k in sd["per_step_drafted"])
    assert set(drafted) <= {1, 2, 4} and drafted.most_common(1)[0][0] == 1, drafted
    for sd in [alone, *many]:
        assert sd["num_draft_tokens"] == sum(sd["per_step_drafted"])  # the drafts actually made
        assert sd["num_accepted_draft_tokens"] == sum(sd["per_step_accepted"])
        assert all(a <= d for a, d in zip(sd["per_step_accepted"], sd["per_step_drafted"], strict=True))
    assert counter_total(metrics, "vllm:spec_decode_num_draft_tokens") == sum(
        sd["num_draft_tokens"] for sd in [alone, *many])
    assert "not modelled" not in p.log()


async def test_synthetic_acceptance_length_is_what_the_config_says(tmp_path: Path) -> None:
    p = start_sim(spec_args({"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 4,
                             "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0,
                             "enable_adaptive_verification": False}), tmp_path, "synthetic")
    try:
        results = await asyncio.gather(*(ask(p.url, 64) for _ in range(4)))
    finally:
        p.stop()
    for sd in results:
        assert sd["mean_acceptance_length"] == 2.0
        assert set(sd["per_step_accepted"]) == {1}
    log = p.log()
    assert "'enable_adaptive_verification' is not modelled by the simulator; accepted and ignored" in log
    assert log.count("not modelled") == 1
