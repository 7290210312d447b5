"""Standard output that outlives its reader: ``speclab run … | head -1`` keeps measuring.

When the process reading speclab's output goes away, a write raises BrokenPipeError; without this
the run would end there, its report unwritten and its recording marked failed. From the first such
write on, what speclab prints is dropped (file descriptor 1 points at /dev/null, so the
interpreter's own flush at exit is quiet too), and the run finishes and writes its files as usual.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO, cast


class PipeSafeStdout:
    """Writes and flushes go to ``stream`` until its reader is gone; everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.reader_gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer…: the stream's own
        return getattr(self._stream, name)


def protect_stdout() -> None:
    """Put ``sys.stdout`` behind ``PipeSafeStdout`` (once, before any command prints)."""
    if not isinstance(sys.stdout, PipeSafeStdout) and sys.stdout is not None:
        sys.stdout = cast(TextIO, PipeSafeStdout(sys.stdout))
