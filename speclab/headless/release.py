"""``speclab release-notes``: read the inputs, write ``release.md`` and ``release.json`` into one directory.

The sweep's plots that its section shows are copied beside the note, so the directory travels whole.
Nothing is written unless every input passed its checks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from speclab.model.errors import InputError, writing

from .release_inputs import collect
from .release_markdown import images, render_release
from .release_notes import release_document


def write_release(directories: Iterable[Path], out: Path) -> tuple[dict[str, Any], list[Path]]:
    inputs = collect(directories)
    doc = release_document(inputs)
    md = render_release(doc, inputs.sweep_markdown)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    written = []
    json_path, md_path = out / "release.json", out / "release.md"
    with writing(f"--out {out}", "the release note"):
        out.mkdir(parents=True, exist_ok=True)
        if inputs.sweep is not None:
            for name in images(md):
                source = inputs.sweep.path / name
                if source.is_file() and source.resolve() != (out / name).resolve():
                    shutil.copyfile(source, out / name)
                    written.append(out / name)
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
        md_path.write_text(md)
    return doc, [md_path, json_path, *written]
