"""ruff and mypy, as configured in pyproject.toml, stay clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_is_clean(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_layers_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_layers_have_no_exceptions() -> None:
    assert "ignore_imports" not in (ROOT / "pyproject.toml").read_text()
