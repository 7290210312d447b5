"""The flag-table generator (scripts/regen_vllm_flags.py) as a module, for the parser tests: where
the cached vLLM 0.33 environment is, the probe that runs inside it, and the data file's rendering."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "regen_vllm_flags.py"
_spec = importlib.util.spec_from_file_location("regen_vllm_flags", SCRIPT)
assert _spec is not None and _spec.loader is not None
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

PROBE: Path = regen.PROBE
DATA_FILE: Path = regen.TARGET
render = regen.render
venv_python = regen.venv_python
