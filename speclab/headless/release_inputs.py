"""The directories a release note is built from, read and checked before anything is written.

Three kinds, told apart by their files: an accept report (``report.json`` with ``gates``), a sweep
directory (``sweep.json``) and a drill report (``report.json`` with ``drill``). Every problem is an
``InputError`` of one line naming the directory: a missing directory, one that is none of the
three, a schema speclab does not read, two inputs of one kind, simulated figures beside measured
ones, a ``time_scale`` that is no time scale (or not 1 on real servers), and inputs whose pairs
(models, revisions, method, tokenizer hashes) differ. A missing kind is not an error here: the note
says which input it lacks.

Inputs at different simulator time scales are not refused but noted (``ReleaseInputs.warnings``):
every figure of a scaled run is modelled time, so they compare, and ``--time-scale auto``, the
default, picks S per command (the accept for its heaviest stage, the sweep per load level, the
drill for its load), so the release workflow's own inputs routinely differ in S.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from speclab.model.errors import InputError

REPORT_SCHEMA: Final = "speclab.report/1"
SWEEP_SCHEMA: Final = "speclab.sweep/1"

ACCEPT: Final = "accept"
SWEEP: Final = "sweep"
DRILL: Final = "drill"
KINDS: Final = (ACCEPT, SWEEP, DRILL)
HOW_TO_MAKE: Final = {
    ACCEPT: "speclab accept LAB --report DIR",
    SWEEP: "speclab sweep LAB --report DIR",
    DRILL: "speclab drill LAB --report DIR",
}

# The pair's identity: any of these differing between two inputs means two different releases.
PAIR_KEYS: Final = ("target_model", "target_revision", "draft_model", "draft_revision", "draft_method")
HASH_KEYS: Final = ("target_tokenizer_sha256", "draft_tokenizer_sha256",
                    "target_sim_tokenizer_sha256", "draft_sim_tokenizer_sha256")
DRILL_KEYS: Final = ("rollback_s", "drain_s", "in_flight_at_flip", "failed_during_flip", "converged", "tenants")


@dataclass(frozen=True)
class ReleaseInput:
    kind: str
    path: Path
    doc: dict[str, Any]

    @property
    def pair(self) -> dict[str, str]:
        raw = self.doc.get("pair") or {}
        return {k: str(v) for k, v in raw.items() if v is not None}

    @property
    def simulated(self) -> bool:
        return bool(self.doc.get("simulated"))

    @property
    def time_scale(self) -> float:
        """The simulators' S (a sweep: its largest, as sweep.json has it); 1 where the report names none."""
        return max(self.time_scales)

    @property
    def time_scale_by_load(self) -> dict[str, float]:
        """A sweep's S per load level (empty for other inputs and for a sweep at one S throughout)."""
        return {str(k): _scale(v) for k, v in (self.doc.get("time_scale_by_load") or {}).items()}

    @property
    def time_scales(self) -> list[float]:
        """Every S the input's figures were measured at, ascending."""
        by_load = self.time_scale_by_load
        return sorted(set(by_load.values())) if by_load else [_scale(self.doc.get("time_scale"))]

    @property
    def time_scale_text(self) -> str:
        """``4``, or a sweep's ``1-8 by load level``."""
        low, high = self.time_scales[0], self.time_scales[-1]
        return f"{low:g}" if low == high else f"{low:g}-{high:g} by load level"


@dataclass(frozen=True)
class ReleaseInputs:
    accept: ReleaseInput | None
    sweep: ReleaseInput | None
    drill: ReleaseInput | None
    sweep_markdown: str | None  # the sweep directory's sweep.md, the note's sweep section
    warnings: tuple[str, ...] = ()  # what the note must say about its inputs (different time scales)

    def present(self) -> list[ReleaseInput]:
        return [i for i in (self.accept, self.sweep, self.drill) if i is not None]

    @property
    def missing(self) -> list[str]:
        return [kind for kind in KINDS if getattr(self, kind) is None]


def _scale(value: Any) -> float:
    """A report's ``time_scale`` (absent in reports from before time scales: they ran at 1)."""
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        raise ValueError(f"time_scale {value!r} is not a time scale (a number of at least 1)")
    return float(value)


def _check_time_scale(item: ReleaseInput) -> None:
    where = item.path / ("sweep.json" if item.kind == SWEEP else "report.json")
    try:
        scales = item.time_scales
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    if not item.simulated and scales != [1.0]:
        raise InputError(f"{where}: measured on real servers but at time scale {item.time_scale_text} "
                         "(real servers always run at 1)")


def _scale_warning(inputs: Sequence[ReleaseInput]) -> str | None:
    if len({tuple(i.time_scales) for i in inputs}) < 2:
        return None
    shown = ", ".join(f"{i.kind} {i.time_scale_text} ({i.path})" for i in inputs)
    return (f"inputs at different time scales: {shown}; every figure is modelled time, and each section of the "
            "note names its own scale")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"{path}: not readable ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object, found {type(doc).__name__}")
    return doc


def _check_schema(path: Path, doc: Mapping[str, Any], expected: str) -> None:
    schema = doc.get("schema")
    if schema != expected:
        raise InputError(f"{path}: schema {schema!r}, expected {expected!r} (a report of another speclab version)")


# The blocks a release note reads, and what each must be where a document has it: a report edited by
# hand or damaged is refused here, naming the file and the key, not deep in the note's builder.
REPORT_SHAPES: dict[str, type] = {"gates": list, "variants": dict, "pair": dict, "drill": dict, "memory": list,
                                  "gpu_memory": list, "exit": dict, "warnings": list}
SWEEP_SHAPES: dict[str, type] = {"cells": list, "crossover": dict, "pair": dict, "warnings": list}


def _check_shapes(path: Path, doc: Mapping[str, Any], shapes: Mapping[str, type]) -> None:
    for key, kind in shapes.items():
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            wanted = "a list" if kind is list else "an object"
            raise InputError(f"{path}: {key!r} is {type(value).__name__} {value!r:.40}, not {wanted} as speclab writes it")
        if isinstance(value, list) and key in ("gates", "cells", "memory") and not all(isinstance(item, dict) for item in value):
            raise InputError(f"{path}: {key!r} holds an entry that is not an object, as speclab writes each")


def read_input(directory: Path) -> ReleaseInput:
    """One directory, classified and checked."""
    if not directory.exists():
        raise InputError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory (give the --report DIR of accept, sweep or drill)")
    sweep, report = directory / "sweep.json", directory / "report.json"
    if sweep.is_file():
        doc = _read_json(sweep)
        _check_schema(sweep, doc, SWEEP_SCHEMA)
        _check_shapes(sweep, doc, SWEEP_SHAPES)
        for key in ("cells", "crossover", "schedule", "speculative_config"):
            if key not in doc:
                raise InputError(f"{sweep}: no {key!r} (every {SWEEP_SCHEMA} document has one)")
        return _checked(ReleaseInput(SWEEP, directory, doc))
    if not report.is_file():
        raise InputError(f"{directory}: neither report.json (accept or drill) nor sweep.json (sweep) in it")
    doc = _read_json(report)
    _check_schema(report, doc, REPORT_SCHEMA)
    _check_shapes(report, doc, REPORT_SHAPES)
    if isinstance(doc.get("drill"), dict):
        absent = [k for k in DRILL_KEYS if k not in doc["drill"]]
        if absent:
            raise InputError(f"{report}: drill block lacks {', '.join(absent)}")
        return _checked(ReleaseInput(DRILL, directory, doc))
    if isinstance(doc.get("gates"), list):
        return _checked(ReleaseInput(ACCEPT, directory, doc))
    raise InputError(f"{report}: a {doc.get('command') or 'run'} report, neither an accept report (no 'gates') "
                     "nor a drill report (no 'drill')")


def _checked(item: ReleaseInput) -> ReleaseInput:
    _check_time_scale(item)
    return item


def _pair_conflict(inputs: Sequence[ReleaseInput]) -> str | None:
    """The first key on which two inputs' pairs disagree, as the refusal's text."""
    for key in (*PAIR_KEYS, *HASH_KEYS):
        seen = [(i, i.pair[key]) for i in inputs if i.pair.get(key)]
        for (first, a), (other, b) in itertools.pairwise(seen):
            if a != b:
                return (f"inputs from different pairs: {key} is {a!r} in the {first.kind} input {first.path} "
                        f"but {b!r} in the {other.kind} input {other.path}")
    for i in inputs:
        absent = [k for k in ("target_model", "draft_model") if not i.pair.get(k)]
        if absent:
            return f"{i.path}: the report names no {' or '.join(absent)}, so its pair cannot be checked"
    return None


def collect(directories: Iterable[Path]) -> ReleaseInputs:
    """Read every directory; refuse duplicates, mixed simulated/measured inputs and different pairs;
    note different time scales."""
    by_kind: dict[str, ReleaseInput] = {}
    for directory in directories:
        item = read_input(Path(directory))
        if item.kind in by_kind:
            raise InputError(f"two {item.kind} inputs: {by_kind[item.kind].path} and {item.path}; give one of each kind")
        by_kind[item.kind] = item
    inputs = list(by_kind.values())
    if not inputs:
        raise InputError("no input directory given")
    kinds = {i.simulated for i in inputs}
    if len(kinds) > 1:
        sim = next(i for i in inputs if i.simulated)
        real = next(i for i in inputs if not i.simulated)
        raise InputError(f"{sim.path} is simulated but {real.path} was measured on real servers; "
                         "one release note holds one or the other")
    conflict = _pair_conflict(inputs)
    if conflict:
        raise InputError(conflict)
    sweep = by_kind.get(SWEEP)
    md = None
    if sweep is not None and (sweep.path / "sweep.md").is_file():
        md = (sweep.path / "sweep.md").read_text()
    warning = _scale_warning([by_kind[k] for k in KINDS if k in by_kind])
    return ReleaseInputs(by_kind.get(ACCEPT), sweep, by_kind.get(DRILL), md, (warning,) if warning else ())
