"""Process exit codes: part of speclab's public interface (docs/file-formats.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INTERNAL_ERROR = 1
    BAD_INPUT = 2
    SERVER_NOT_READY = 3
    ALL_REQUESTS_FAILED = 4
    MEASUREMENT_INVALID = 5
    MEASUREMENT_INCOMPLETE = 6  # a traffic worker died, a record batch was dropped, a begun request has no record
    TOKENIZER_ALIGNMENT = 10
    GOLDEN_SET = 11
    EQUIVALENCE = 12
    STRUCTURED_OUTPUT = 13
    LATENCY_CURVE = 14
    CONCURRENCY_STRESS = 15
    CANARY = 16
    ROLLBACK_DRILL = 17
    INTERRUPTED = 130
