"""Name why a server died, in one line, from its log (vLLM 0.33 and the simulator print alike)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# (cause, patterns) in priority order: the first cause with a matching line wins.
_CAUSES: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = (
    (
        "CUDA out of memory",
        (
            re.compile(r"CUDA out of memory|OutOfMemoryError"),
            re.compile(r"No available memory for the cache blocks"),
            re.compile(r"is larger than the available KV cache memory|KV cache is needed, which is larger"),
        ),
    ),
    ("unknown argument", (re.compile(r"unrecognized arguments?:?.*"), re.compile(r"error: argument \S+"))),
    ("port in use", (re.compile(r"Address already in use|\[Errno 98\]"),)),
    (
        "model not found",
        (
            re.compile(r"Unknown model"),
            re.compile(r"Repository Not Found|RepositoryNotFoundError|is not a local folder and is not a valid model identifier"),
            re.compile(r"[Mm]odel .* not found|No such model"),
        ),
    ),
    ("engine crashed", (re.compile(r"EngineCore encountered a fatal error|Engine core initialization failed"),)),
)


def classify_failure(lines: Iterable[str]) -> tuple[str, str] | None:
    """(cause, the log line that shows it), or None if the log names no known cause."""
    lines = list(lines)
    for cause, patterns in _CAUSES:
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


def describe_exit(returncode: int | None, lines: Iterable[str]) -> str:
    """One line: the named cause and its evidence, else the exit status and the last log line."""
    lines = [ln for ln in lines if ln.strip()]
    found = classify_failure(lines)
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
