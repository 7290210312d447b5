"""A content chunk written from its template is, byte for byte, the chunk encoded from its dict."""

from __future__ import annotations

from typing import Any

import pytest

from speclab.sim.serve_protocol import ChunkBytes, sse, usage

TEXTS = ["", " the", 'a "quoted" \\ word\n', "naïve café ☕", "\u2028\t\x00"]


def _dict_chunk(base: dict[str, Any], text: str, chat: bool, counts: tuple[int, int] | None) -> dict[str, Any]:
    choice: dict[str, Any]
    if chat:
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}
    chunk: dict[str, Any] = {**base, "choices": [choice]}
    if counts is not None:
        chunk["usage"] = usage(*counts)
    return chunk


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("counts", [None, (7, 0), (12, 345)])
@pytest.mark.parametrize("text", TEXTS)
def test_template_matches_json(chat: bool, counts: tuple[int, int] | None, text: str) -> None:
    base = {"id": "cmpl-0f3a", "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1764600000, "model": 'sim-8b "served"'}
    assert ChunkBytes(base, chat=chat).content(text, counts) == sse(_dict_chunk(base, text, chat, counts))
