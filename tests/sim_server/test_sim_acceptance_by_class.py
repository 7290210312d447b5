"""Acceptance emerges per prompt class from the real engine (skipped until speclab/sim/engine.py exists)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from speclab.model.paths import bundled_dir

from .conftest import REAL_ENGINE, SimProcess, start_sim
from .sse import post_json

pytestmark = pytest.mark.skipif(not REAL_ENGINE, reason="needs the real engine core (speclab/sim/engine.py)")
K = 4


@pytest.fixture(scope="module")
def sim_draft(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    args = ["sim-8b", "--speculative-config", json.dumps({"method": "draft_model", "model": "sim-1b",
                                                          "num_speculative_tokens": K}),
            "--per-request-spec-decode-metrics", "summary", "--enable-per-request-metrics"]
    proc = start_sim(args, tmp_path_factory.mktemp("simd"), "draft", env=None)
    yield proc
    proc.stop()


def prompts(cls: str, n: int) -> list[dict[str, object]]:
    path = Path(bundled_dir("scenarios")) / "prompts" / f"{cls}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:n]


async def class_acceptance(url: str, cls: str) -> tuple[float, int]:
    async def one(row: dict[str, object]) -> tuple[int, int]:
        status, body = await post_json(url + "/v1/chat/completions",
                                       {"messages": row["messages"], "max_tokens": row.get("max_tokens", 64),
                                        "temperature": 0})
        assert status == 200, body
        sd = body["metrics"]["speculative_decoding"]
        return sd["num_accepted_draft_tokens"], sd["num_draft_tokens"]

    results = await asyncio.gather(*(one(r) for r in prompts(cls, 6)))
    accepted = sum(a for a, _ in results)
    drafted = sum(d for _, d in results)
    assert drafted > 0
    return accepted / drafted, drafted


async def test_tool_call_and_prose_accept_differently(sim_draft: SimProcess) -> None:
    tool, _ = await class_acceptance(sim_draft.url, "tool_call")
    prose, _ = await class_acceptance(sim_draft.url, "long_continuation")
    assert 0.0 <= tool <= 1.0 and 0.0 <= prose <= 1.0
    assert abs(tool - prose) >= 0.05, (tool, prose)
