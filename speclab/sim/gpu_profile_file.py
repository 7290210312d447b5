"""GPU profile files (``--sim-gpu-profile FILE``): a measured profile replacing a bundled one.

``bench/calibrate_gpu.py`` writes them on a GPU host; the simulator loads them here. The file is
JSON, one object with ``"schema": "speclab.gpu_profile/1"`` and every field of
``hardware.GpuProfile``; ``measured`` (the raw grid and fit) may ride along and is kept out of the
model. Every problem names the field, so a hand-edited file fails with a cause, not a traceback.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from .hardware import GpuProfile

SCHEMA: Final = "speclab.gpu_profile/1"
_EXTRA_KEYS: Final = frozenset({"schema", "measured"})
# Efficiencies are shares of the file's own bandwidth and FLOP/s figures. Caches can make a small
# shape's reads beat a copy-bandwidth figure, so a share above 1 is allowed; 4 and over is a typo
# (a percentage) or a broken measurement.
_EFFICIENCIES: Final = frozenset({"weight_efficiency", "kv_efficiency", "flops_efficiency"})
_POSITIVE: Final = frozenset({"hbm_bandwidth", "peak_flops", "memory_bytes", "interconnect_bandwidth"})


class GpuProfileFileError(ValueError):
    """A profile file that cannot be used; the message names the file and the field."""


def _number(path: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GpuProfileFileError(f"{path}: field {key!r}: expected a finite number, got {value!r}")
    number = float(value)
    if key in _EFFICIENCIES and not 0.0 < number <= 4.0:
        raise GpuProfileFileError(f"{path}: field {key!r}: expected a share of peak in (0, 4], got {value!r}")
    if key in _POSITIVE and number <= 0.0:
        raise GpuProfileFileError(f"{path}: field {key!r}: expected a number greater than 0, got {value!r}")
    if number < 0.0:
        raise GpuProfileFileError(f"{path}: field {key!r}: expected a number of seconds >= 0, got {value!r}")
    return number


def profile_from_mapping(data: Any, path: str) -> GpuProfile:
    if not isinstance(data, dict):
        raise GpuProfileFileError(f"{path}: expected a JSON object with the profile's fields")
    if data.get("schema") != SCHEMA:
        raise GpuProfileFileError(f"{path}: field 'schema': expected {SCHEMA!r}, got {data.get('schema')!r}")
    names = [f.name for f in fields(GpuProfile)]
    unknown = sorted(set(data) - set(names) - _EXTRA_KEYS)
    if unknown:
        raise GpuProfileFileError(f"{path}: field {unknown[0]!r}: not a GPU profile field")
    values: dict[str, Any] = {}
    for name in names:
        if name not in data:
            if name == "source":
                values[name] = f"profile file {path}"
                continue
            raise GpuProfileFileError(f"{path}: field {name!r}: missing")
        value = data[name]
        if name in ("name", "source"):
            if not isinstance(value, str) or not value.strip():
                raise GpuProfileFileError(f"{path}: field {name!r}: expected a non-empty string, got {value!r}")
            values[name] = value
        else:
            values[name] = _number(path, name, value)
    return GpuProfile(**values)


def load_gpu_profile(path: str | Path) -> GpuProfile:
    """The profile in ``path``; GpuProfileFileError (naming the file and field) if it is not usable."""
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GpuProfileFileError(f"{shown}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpuProfileFileError(f"{shown}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuProfileFileError(f"{shown}: invalid JSON: {exc}") from None
    return profile_from_mapping(data, shown)


def profile_to_mapping(profile: GpuProfile, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"schema": SCHEMA, **profile.as_dict()}
    if measured is not None:
        data["measured"] = measured
    return data
