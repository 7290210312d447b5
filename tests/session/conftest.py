from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from speclab.model.records import RequestRecord
from tests.labs import BASELINE, lab_toml


def write_lab(path: Path, *, name: str = "t", max_num_seqs: int = 64, server_extra: str = "",
              variant_extra: str = "") -> Path:
    extra = 'sim_gpu = "H100"\n' + server_extra
    path.write_text(lab_toml(name, max_num_seqs=max_num_seqs, max_model_len=4096, server_extra=extra,
                             variants=BASELINE + variant_extra + "\n"))
    return path


def run_cli(args: list[str], *, cwd: Path, timeout: float = 90, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "speclab.cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=full_env)


def read_records(recording: Path) -> list[RequestRecord]:
    """A recording's requests.jsonl, read line by line as a user's script would."""
    lines = (recording / "requests.jsonl").read_text().splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


def read_report(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "report.json").read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


# What a replayed report cannot share with the live one: when and how it was made, and the facts
# only the live process had (its exit verdict, the engine it chose, server memory, cross-checks, its
# judgement of the simulators' clocks).
NOT_REPLAYED = ("created", "command", "replay", "host", "engine", "memory", "gpu_memory", "crosscheck",
                "crosscheck_ok", "exit", "recording", "warnings", "accounting", "simulator_clock")


def replayable_part(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in NOT_REPLAYED}
