"""Name why a server died, in one line, from its log.

The causes and the lines that show them are the backend's ``exit_causes`` (vLLM 0.33's by
default: the simulator prints alike, and HAProxy's "Address already in use" matches too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .backends.base import ExitCause
from .backends.vllm import EXIT_CAUSES


def classify_failure(lines: Iterable[str], causes: Sequence[ExitCause] = EXIT_CAUSES) -> tuple[str, str] | None:
    """(cause, the log line that shows it), or None if the log names no known cause."""
    lines = list(lines)
    for cause, patterns in causes:
        for i, line in enumerate(lines):
            if any(p.search(line) for p in patterns):
                return cause, _strip_prefix(_root_cause(lines, i))
    return None


def _root_cause(lines: list[str], i: int) -> str:
    """vLLM's generic "... See root cause above." line points at the error logged before it."""
    if "See root cause above" in lines[i]:
        for earlier in reversed(lines[:i]):
            if _ERROR_LINE.search(earlier):
                return earlier
    return lines[i]


def describe_exit(returncode: int | None, lines: Iterable[str], causes: Sequence[ExitCause] = EXIT_CAUSES) -> str:
    """One line: the named cause and its evidence, else the exit status and the last log line."""
    lines = [ln for ln in lines if ln.strip()]
    found = classify_failure(lines, causes)
    status = "exited" if returncode is None else (f"exited with code {returncode}" if returncode >= 0 else f"killed by signal {-returncode}")
    if found:
        cause, evidence = found
        return f"{cause} ({status}): {evidence}"
    last = _strip_prefix(lines[-1]) if lines else "no output"
    return f"{status}; last log line: {last}"


_ERROR_LINE = re.compile(r"\b\w+(?:Error|Exception): ")
_PREFIX = re.compile(r"^\((?:APIServer|EngineCore\S*) pid=\d+\) [A-Z]+ (?:\d\d-\d\d \d\d:\d\d:\d\d )?\[[^\]]+\] ")


def _strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line.strip())[:300]
