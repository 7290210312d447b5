"""speclab's error hierarchy.

    SpeclabError                 every error a user may see; carries its exit code
    ├── InputError               a bad file, option or argument (exit 2)
    ├── ServerNotReadyError      a server exited or never answered /health (exit 3)
    ├── AllRequestsFailedError   nothing succeeded (exit 4)
    └── MeasurementInvalidError  the client could not keep up (exit 5)

Front ends print ``str(error)`` as one line; no traceback for these. ``writing`` turns a failed
write of an output (a report, a release note) into such an InputError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .exit_codes import ExitCode


class SpeclabError(Exception):
    exit_code: ExitCode = ExitCode.INTERNAL_ERROR

    def __init__(self, message: str, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(SpeclabError):
    """A user-supplied file or option is invalid. The message names file, field path and expectation."""

    exit_code = ExitCode.BAD_INPUT


class ServerNotReadyError(SpeclabError):
    exit_code = ExitCode.SERVER_NOT_READY


class AllRequestsFailedError(SpeclabError):
    exit_code = ExitCode.ALL_REQUESTS_FAILED


class MeasurementInvalidError(SpeclabError):
    exit_code = ExitCode.MEASUREMENT_INVALID


@contextlib.contextmanager
def writing(where: str | Path, what: str) -> Iterator[None]:
    """Writes inside it that fail (a full disk, a vanished or read-only directory) end in one line, exit 2.

    ``where`` names the place as the user gave it (``--report DIR``); the message reads
    ``WHERE: cannot write WHAT: CAUSE``.
    """
    try:
        yield
    except OSError as error:
        raise InputError(f"{where}: cannot write {what}: {error.strerror or error}") from None
