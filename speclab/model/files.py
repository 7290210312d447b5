"""Output files are written whole or not at all: a full disk or a Ctrl-C mid-write leaves the
previous file (or none), never a truncated one that a reader would take for the real thing."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a sibling ``.tmp`` file, flush it to disk, then rename it over ``path``.
    OSError (the disk filled up, the directory went) propagates with the ``.tmp`` file removed."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
