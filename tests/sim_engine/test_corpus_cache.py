"""The tokenized corpus's on-disk cache: a broken file costs a tokenization, never the start-up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speclab.sim.lm import encoded_corpus
from speclab.sim.tokenizer import load_tokenizer


def test_a_cache_file_cut_short_is_tokenized_again_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECLAB_CACHE_DIR", str(tmp_path))
    directory = load_tokenizer("sim-8b").directory
    tokens, offsets = encoded_corpus.__wrapped__(directory)  # uncached: writes the file
    (cached,) = (tmp_path / "sim").glob("corpus-*.npz")
    good = cached.read_bytes()
    cached.write_bytes(good[: len(good) // 3])  # a full disk or a killed process left a third of it
    again, again_offsets = encoded_corpus.__wrapped__(directory)
    assert np.array_equal(again, tokens) and np.array_equal(again_offsets, offsets)
    assert cached.read_bytes() == good  # rewritten whole
    assert [p.name for p in (tmp_path / "sim").iterdir()] == [cached.name]  # no temporary file left
