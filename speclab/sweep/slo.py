"""Latency SLOs (``--slo ttft_p99=200ms,tpot_p99=40ms``) and goodput under them.

A key is a latency metric and a percentile; the value is the ceiling. A cell *meets* the SLOs
for a class when each named percentile of that class is within its ceiling (read off the report
block). *Goodput* is the rate of requests that are good one by one, as vLLM's own benchmark counts
it: a request is good when it finished without error and each metric the SLOs name is within its
ceiling for that request. It needs the cell's request records; without them goodput is not
measured and says so, rather than being guessed from percentiles.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from speclab.model.errors import InputError
from speclab.model.names import Metric
from speclab.model.records import RequestRecord

# SLO metric -> the report's latency key (corrected views: what a user waits, from the intended time).
SLO_METRICS: dict[str, Metric] = {
    "ttft": Metric.TTFT_CORRECTED,
    "tpot": Metric.TPOT,
    "e2e": Metric.E2E_CORRECTED,
}
# SLO percentile -> the report block's field.
SLO_PERCENTILES: dict[str, str] = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "p999": "p999_ms"}
SLO_KEYS: tuple[str, ...] = tuple(f"{m}_{p}" for m in SLO_METRICS for p in SLO_PERCENTILES)
_UNITS = {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s)?\s*$")


@dataclass(frozen=True, slots=True)
class Slo:
    """Ceilings in milliseconds by key (``ttft_p99``); empty means no SLO was given."""

    ceilings_ms: tuple[tuple[str, float], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ceilings_ms)

    def as_dict(self) -> dict[str, float]:
        return dict(self.ceilings_ms)

    def text(self) -> str:
        return ",".join(f"{k}={v:g}ms" for k, v in self.ceilings_ms) or "none"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], field: str = "slo") -> Slo:
        return parse_slo(",".join(f"{k}={v}ms" for k, v in data.items()), field) if data else cls()


def parse_slo(text: str | None, field: str = "--slo") -> Slo:
    """``ttft_p99=200ms,tpot_p99=40ms`` (a bare number is milliseconds, as in vLLM's --goodput)."""
    if text is None or not text.strip():
        return Slo()
    seen: dict[str, float] = {}
    for part in text.split(","):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"{field}: {part.strip()!r} is not KEY=VALUE (e.g. ttft_p99=200ms)")
        if key not in SLO_KEYS:
            raise InputError(f"{field}: unknown key {key!r} (known: {', '.join(SLO_KEYS)})")
        if key in seen:
            raise InputError(f"{field}: {key} is given twice")
        match = _VALUE.match(raw)
        if not match:
            raise InputError(f"{field}: {key}={raw.strip()!r} is not a duration (e.g. 200ms, 0.2s)")
        value = float(match.group(1)) * _UNITS[match.group(2) or "ms"]
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"{field}: {key} must be a positive duration, got {raw.strip()!r}")
        seen[key] = value
    return Slo(tuple(seen.items()))


def percentile_ms(block: Mapping[str, Any], key: str) -> float | None:
    metric, _, pct = key.partition("_")
    entry = (block.get("latency") or {}).get(SLO_METRICS[metric].value) or {}
    value = entry.get(SLO_PERCENTILES[pct])
    return None if value is None else float(value)


def slo_met(block: Mapping[str, Any], slo: Slo) -> bool | None:
    """Whether every named percentile of a class block is within its ceiling (None: no SLO, or unmeasured)."""
    if not slo:
        return None
    values = [(percentile_ms(block, key), ceiling) for key, ceiling in slo.ceilings_ms]
    if any(v is None for v, _ in values):
        return None
    return all(v is not None and v <= ceiling for v, ceiling in values)


def _request_ms(record: RequestRecord, metric: str) -> float | None:
    value = getattr(record, SLO_METRICS[metric].value)
    return None if value is None else 1000.0 * value


def request_is_good(record: RequestRecord, slo: Slo) -> bool:
    if not record.ok:
        return False
    for key, ceiling in slo.ceilings_ms:
        value = _request_ms(record, key.partition("_")[0])
        if value is not None and value > ceiling:
            return False
        if value is None and key.startswith(("ttft", "e2e")):
            return False
    return True


def goodput(records: Iterable[RequestRecord], slo: Slo, window_s: float) -> dict[str, Any]:
    """Good requests, their share and their rate over ``window_s`` (warm-up requests excluded)."""
    measured = [r for r in records if not r.warmup]
    good = sum(1 for r in measured if request_is_good(r, slo))
    return {
        "source": "requests",
        "requests": len(measured),
        "good": good,
        "attainment": good / len(measured) if measured else None,
        "requests_per_s": round(good / window_s, 4) if window_s > 0 else None,
    }


def goodput_block(block: Mapping[str, Any], slo: Slo, records: Iterable[RequestRecord] | None) -> dict[str, Any]:
    """The ``goodput`` entry a sweep cell adds to each class block."""
    out: dict[str, Any] = {"slo": slo.as_dict(), "slo_met": slo_met(block, slo)}
    if not slo:
        return {**out, "source": "none", "requests_per_s": None, "attainment": None}
    if records is None:
        return {**out, "source": "not_measured", "requests_per_s": None, "attainment": None,
                "note": "goodput needs the cell's request records"}
    return {**out, **goodput(records, slo, float(block.get("window_s") or 0.0))}
