"""Process stdio for spawning worker processes under a front end that replaced it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def real_stdio() -> Iterator[None]:
    """Process stdio while worker processes spawn: a front end (Textual) may have replaced
    sys.stdout/sys.stderr with objects without a file descriptor, which multiprocessing rejects."""
    saved = sys.stdout, sys.stderr
    try:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            try:
                ok = stream.fileno() >= 0
            except (AttributeError, OSError, ValueError):
                ok = False
            if not ok:
                setattr(sys, name, getattr(sys, f"__{name}__"))
        yield
    finally:
        sys.stdout, sys.stderr = saved
