"""Logprobs in vLLM's streamed chunks (chat's ``content`` list, completions' parallel lists) become entries."""

from __future__ import annotations

from speclab.traffic.client import _logprob_entries


def test_chat_logprobs() -> None:
    chunk = {"content": [{"token": " Paris", "logprob": -0.01, "bytes": [32],
                          "top_logprobs": [{"token": " Paris", "logprob": -0.01}, {"token": " Lyon", "logprob": -4.6}]}]}
    assert _logprob_entries(chunk) == [{"token": " Paris", "logprob": -0.01, "top": {" Paris": -0.01, " Lyon": -4.6}}]


def test_completions_logprobs() -> None:
    chunk = {"text_offset": [0, 3], "token_logprobs": [-0.5, -0.25], "tokens": ["The", " cap"],
             "top_logprobs": [{"The": -0.5, "A": -1.2}, {" cap": -0.25}]}
    assert _logprob_entries(chunk) == [{"token": "The", "logprob": -0.5, "top": {"The": -0.5, "A": -1.2}},
                                       {"token": " cap", "logprob": -0.25, "top": {" cap": -0.25}}]
    assert _logprob_entries(None) == [] and _logprob_entries({"content": []}) == []
