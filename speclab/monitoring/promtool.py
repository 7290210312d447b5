"""Prometheus's own ``promtool``, run over a kit: ``check rules`` and ``test rules``.

speclab does not ship promtool; it comes with Prometheus (Debian: ``apt-get install prometheus``).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from speclab.model.errors import InputError

INSTALL_HINT: Final = "install Prometheus's promtool (Debian: apt-get install prometheus)"
TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class PromtoolResult:
    command: str
    ok: bool
    output: str


def find_promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        raise InputError(f"promtool not found on PATH: {INSTALL_HINT}")
    return path


def run(args: list[str], cwd: Path | None = None, stdin: str | None = None) -> PromtoolResult:
    proc = subprocess.run([find_promtool(), *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    return PromtoolResult(" ".join(["promtool", *args]), proc.returncode == 0, (proc.stdout + proc.stderr).strip())


def check_kit(directory: Path) -> list[PromtoolResult]:
    """``check rules`` on every rule file, then ``test rules`` on every test file (run from the kit,
    since test files name their rule files relative to themselves)."""
    rules = sorted(p.name for p in directory.glob("*.rules.yml"))
    tests = sorted(p.name for p in directory.glob("*.test.yml"))
    return [run(["check", "rules", *rules], cwd=directory), run(["test", "rules", *tests], cwd=directory)]
