"""A sweep directory's files: ``sweep.json``, ``sweep.md`` and the plots at the top level.

Written after every finished cell and on an interrupt, so the directory always holds the
reductions of what has finished; ``cells/`` (one recording per cell) is the driver's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speclab.model.files import write_text_atomic

from .markdown import render_markdown
from .plots import write_plots
from .result import SweepResult, sweep_document, write_sweep_json


def write_sweep(directory: Path, result: SweepResult, meta: Mapping[str, Any], *, plots: bool = True) -> list[Path]:
    """Write ``sweep.json``, ``sweep.md`` and (unless ``plots`` is False) every plot; returns the paths."""
    path = write_sweep_json(directory, result, meta)
    doc = json.loads(path.read_text())
    md = directory / "sweep.md"
    write_text_atomic(md, render_markdown(doc))
    written = [path, md]
    if plots:
        written += write_plots(directory, result, dict(meta))
    return written


__all__ = ["sweep_document", "write_sweep"]
