"""The simulator fixtures stop what they started on every path, a failed start included."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psutil
import pytest

from .conftest import start_sim


def _ours(marker: str) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if marker in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.Error:
            pass
    return out


def test_a_simulator_that_is_not_ready_in_time_is_stopped(tmp_path: Path) -> None:
    marker = f"leakcheck-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError, match="not ready"):
        start_sim(["sim-8b", "--served-model-name", marker], tmp_path, "slow", ready_timeout=0.001)
    assert _ours(marker) == []  # it used to run on, unreachable, until the session ended
