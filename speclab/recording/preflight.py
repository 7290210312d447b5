"""Can the run write where it was told to? Checked before any server starts, so a bad path costs nothing.

``--record`` and ``--report`` that cannot be written (a file in the way, a read-only or full disk,
an existing recording without ``--force``) are bad input: exit 2 with one line naming the path
and the cause, before minutes of traffic would end in a traceback.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from speclab.model.errors import InputError

from . import layout

PROBE_BYTES = 16 * 1024  # a full disk refuses it; costs nothing
PROBE_NAME = ".speclab-write-probe"


def _existing_parent(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def require_writable_dir(path: Path, what: str) -> None:
    """``path`` is (or can become) a directory that takes a small file: else InputError naming why."""
    found = _existing_parent(path)
    if not found.is_dir():
        raise InputError(f"{what} {path}: {found} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / PROBE_NAME
        with open(probe, "wb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as error:
        raise InputError(f"{what} {path}: cannot write there: {error.strerror or error}") from None
    finally:
        with contextlib.suppress(OSError):
            (path / PROBE_NAME).unlink()


def require_recording_path(path: Path, *, force: bool) -> None:
    """The rules the recording writer applies, checked up front, then a write probe."""
    if path.exists() and not path.is_dir():
        raise InputError(f"--record {path}: exists and is not a directory; choose another recording path")
    if path.is_dir() and any(p.name != PROBE_NAME for p in path.iterdir()):
        if not (path / layout.MANIFEST).exists():
            raise InputError(f"--record {path}: directory is not empty and is not a recording; refusing to overwrite it")
        if not force:
            raise InputError(f"--record {path}: a recording already exists there; pass --force to overwrite it")
    require_writable_dir(path, "--record")


def check_outputs(record: str | Path | None, report: str | Path | None, *, force: bool) -> None:
    """Both paths can be written; the directories the probes made are taken away again, so a run
    refused or stopped before it wrote anything leaves no empty recording behind (the writers
    make their directories when they write)."""
    for given, is_record in ((record, True), (report, False)):
        if given is None:
            continue
        path = Path(given)
        made = [p for p in (path, *path.parents) if not p.exists()]
        try:
            if is_record:
                require_recording_path(path, force=force)
            else:
                require_writable_dir(path, "--report")
        finally:
            for directory in made:  # deepest first; only the empty ones this probe made
                with contextlib.suppress(OSError):
                    directory.rmdir()
