"""The documented range of every number a user can give speclab, and the size limits of prompts.

A field without an upper bound lets ``rate = inf``, ``duration_s = 1e12`` or ``max_num_seqs =
1e18`` through validation, to hang or exhaust a run much later. Every numeric field of the
scenario, lab and gates files and every numeric option names its range here; the models use these
constants, ``docs/limits.md`` is generated from the models (``python -m speclab.model.limits``),
and a test checks that no numeric field lacks a bound.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator
from typing import Any, Final

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .errors import InputError

# Run length and load.
MAX_DURATION_S: Final = 30 * 24 * 3600.0  # thirty days of traffic
MAX_REQUESTS: Final = 100_000_000
MAX_RATE: Final = 10_000.0  # requests per second, per variant
MAX_CONCURRENCY: Final = 10_000  # requests in flight, per variant
MAX_BURSTINESS: Final = 1_000.0
MAX_WEIGHT: Final = 1_000_000.0
MAX_STALL_TIMEOUT_S: Final = 3_600.0
MAX_REQUEST_TIMEOUT_S: Final = 86_400.0
MAX_WORKERS: Final = 128
MIN_REPLAY_SPEED: Final = 0.25  # replay --speed and the app's replay bar: × recorded time
MAX_REPLAY_SPEED: Final = 16.0
SEED_MIN: Final = -(2**63)
SEED_MAX: Final = 2**63 - 1


def auto_workers(cpus: int | None = None) -> int:
    """``--workers auto``: half the CPUs this process may run on, at least one, at most eight. The
    other half is for the parent (aggregation, recording, the app) and servers sharing the host:
    on two cores a second worker cost more CPU per request than it gained in accuracy."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cpus // 2))


# Sampling and sizes.
MAX_TEMPERATURE: Final = 100.0
MAX_TOP_K: Final = 1_000_000
MAX_OUTPUT_TOKENS: Final = 262_144  # max_tokens
MAX_PROMPT_CHARS: Final = 1_000_000  # one prompt, or one message list's total content
MAX_PROMPTS_FILE_BYTES: Final = 64 * 1024 * 1024
MAX_CONFIG_FILE_BYTES: Final = 4 * 1024 * 1024  # a scenario, lab or gates TOML file, or a schema_file

# Server settings (vLLM's own limits are looser; these are far beyond any real deployment).
MAX_SPEC_TOKENS: Final = 64  # k, num_speculative_tokens
MAX_PROMPT_LOOKUP: Final = 256
MAX_NUM_SEQS: Final = 65_536
MAX_BATCHED_TOKENS: Final = 16_777_216
MAX_MODEL_LEN: Final = 16_777_216
MAX_STREAM_INTERVAL: Final = 1_024
MAX_TENSOR_PARALLEL: Final = 64
MAX_GPU_INDEX: Final = 1_023

# Gates.
MAX_RATIO: Final = 1_000.0
MAX_SAMPLES: Final = 100_000
MAX_GATE_REQUESTS: Final = 1_000_000


def check_option(name: str, value: float | None, low: float, high: float, *, low_open: bool = False) -> None:
    """An option's value within its documented range, else InputError (exit 2) saying the range."""
    if value is None:
        return
    ok = (value > low if low_open else value >= low) and value <= high
    if not ok:  # NaN fails both comparisons
        words = "greater than" if low_open else "at least"
        raise InputError(f"{name}: expected a number {words} {_plain(low)} and at most {_plain(high)}, got {value!r}")


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _bounds(info: FieldInfo) -> tuple[str | None, str | None]:
    """(lower, upper) as written in the docs: "> 0", "≥ 1", "≤ 10,000"; None where unbounded."""
    lo = hi = None
    for meta in info.metadata:
        if isinstance(meta, at.Gt):
            lo = f"> {_fmt(meta.gt)}"
        elif isinstance(meta, at.Ge):
            lo = f"≥ {_fmt(meta.ge)}"
        elif isinstance(meta, at.Lt):
            hi = f"< {_fmt(meta.lt)}"
        elif isinstance(meta, at.Le):
            hi = f"≤ {_fmt(meta.le)}"
    return lo, hi


def _numeric(annotation: Any) -> tuple[Any, FieldInfo | None] | None:
    """The numeric type inside ``annotation`` (Optional, list items, dict values), with its
    Annotated constraints; None when the annotation holds no number."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base = typing.get_args(annotation)[0]
        found = _numeric(base)
        if found is not None and found[1] is None:
            return found[0], FieldInfo.from_annotation(annotation)
        return found
    if origin in (list, tuple, dict) or origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = typing.get_args(annotation)
        members = args[1:] if origin is dict else args
        for arg in members:
            found = _numeric(arg)
            if found is not None:
                return found
        return None
    if annotation in (int, float) and annotation is not bool:
        return annotation, None
    return None


def numeric_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str | None, str | None]]:
    """(path, type name, lower, upper) for every numeric field under ``model``, nested tables included."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        found = _numeric(info.annotation)
        if found is not None:
            kind, inner = found
            lo, hi = _bounds(inner) if inner is not None else (None, None)
            if lo is None and hi is None:
                lo, hi = _bounds(info)
            yield path, kind.__name__, lo, hi
            continue
        for member in _models_in(info.annotation):
            yield from numeric_fields(member, f"{path}.")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation) if origin is not None else ():
        out.extend(_models_in(arg))
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def range_table() -> str:
    """The Markdown tables of docs/limits.md, one per file kind."""
    from .gates import Gates
    from .lab import Lab
    from .scenario import PromptItem, Scenario

    out: list[str] = []
    for title, model in (("Scenario files", Scenario), ("Prompts file lines", PromptItem), ("Lab files", Lab),
                         ("Gates files", Gates)):
        out += [f"### {title}", "", "| field | type | lower bound | upper bound |", "|---|---|---|---|"]
        seen: set[str] = set()
        for path, kind, lo, hi in numeric_fields(model):
            if path in seen or path.startswith("profiles."):
                continue
            seen.add(path)
            out.append(f"| `{path}` | {kind} | {lo or '—'} | {hi or '—'} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(range_table())
