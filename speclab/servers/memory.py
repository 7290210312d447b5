"""Memory facts per server: what the start-up log states, NVML where a GPU exists, a report table.

Which lines state the facts is the backend's ``memory_lines``; vLLM and the simulator print the
same start-up lines (the simulator's figures are modelled), so vLLM's serve both and are the
default. NVML (``nvidia-ml-py``) is optional and only asked where a GPU exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .backends.base import MemoryLines
from .backends.vllm import MEMORY_LINES


@dataclass(slots=True)
class MemoryInfo:
    weights_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None  # the tokens-per-request the concurrency is stated for

    def update(self, line: str, lines: MemoryLines = MEMORY_LINES) -> None:
        if m := lines.weights_gib.search(line):
            self.weights_gib = float(m.group(1))
        if m := lines.kv_cache_tokens.search(line):
            self.kv_cache_tokens = int(m.group(1).replace(",", ""))
        if m := lines.concurrency.search(line):
            self.max_concurrency_len = int(m.group(1).replace(",", ""))
            self.max_concurrency = float(m.group(2))

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if v is not None}


def parse_memory(lines: Iterable[str], patterns: MemoryLines = MEMORY_LINES) -> MemoryInfo:
    info = MemoryInfo()
    for line in lines:
        info.update(line, patterns)
    return info


@dataclass(frozen=True, slots=True)
class GpuMemory:
    index: int
    name: str
    used_gib: float
    total_gib: float


def gpu_memory(indices: Sequence[int] | None = None) -> list[GpuMemory] | None:
    """Used/total memory of the given GPUs from NVML; None where NVML or a GPU is unavailable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        out = []
        for i in indices if indices is not None else range(count):
            if not 0 <= i < count:
                continue
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            out.append(
                GpuMemory(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    used_gib=mem.used / 2**30,
                    total_gib=mem.total / 2**30,
                )
            )
        return out
    finally:
        pynvml.nvmlShutdown()


class HasMemory(Protocol):
    variant: str
    memory: MemoryInfo
    baseline: bool


@dataclass(slots=True)
class KvUsage:
    """A server's KV-cache usage over a run, as scrapes add to it: the mean and the peak, in
    memory that does not grow with the run's length."""

    samples: int = 0
    total: float = 0.0
    peak: float = 0.0

    def add(self, value: float) -> None:
        self.samples += 1
        self.total += value
        self.peak = value if self.samples == 1 else max(self.peak, value)

    @property
    def mean(self) -> float | None:
        return self.total / self.samples if self.samples else None


def memory_table(
    servers: Mapping[str, HasMemory] | Iterable[HasMemory],
    kv_usage_by_variant: Mapping[str, KvUsage] | None = None,
) -> list[dict[str, Any]]:
    """One row per variant: weights, KV-cache tokens, max concurrency, KV usage over the run, and
    the same against the baseline (``*_vs_baseline``: difference for GiB, ratio for tokens and
    concurrency). Values the server did not state are None. For servers that ran one
    configuration (``accept``); a run whose variants can be relaunched uses ``epoch_memory_table``."""
    items = list(servers.values()) if isinstance(servers, Mapping) else list(servers)
    usage = kv_usage_by_variant or {}
    base = next((s for s in items if s.baseline), None)
    bm = base.memory if base is not None else None
    return [{"variant": s.variant, **_facts(s.baseline, s.memory, usage.get(s.variant), bm)} for s in items]


@dataclass(frozen=True, slots=True)
class EpochMemory:
    """One config epoch of one variant: the memory facts of the server that ran it (empty where
    they are not known) and the KV usage scraped while the epoch ran."""

    variant: str
    epoch: int
    label: str
    start_s: float
    baseline: bool
    memory: MemoryInfo
    kv_usage: KvUsage | None = None


def epoch_memory_table(epochs: Sequence[EpochMemory]) -> list[dict[str, Any]]:
    """One row per (variant, epoch), as ``memory_table``'s plus ``epoch`` and ``label``: each row
    pairs its epoch's server facts with its epoch's KV usage, nothing summed across epochs. The
    ``*_vs_baseline`` figures compare with the baseline's epoch that was running when the row's
    epoch began (its first where none had begun yet)."""
    bases = sorted((e for e in epochs if e.baseline), key=lambda e: (e.start_s, e.epoch))
    rows = []
    for e in epochs:
        base = next((b for b in reversed(bases) if b.start_s <= e.start_s), bases[0] if bases else None)
        rows.append({"variant": e.variant, "epoch": e.epoch, "label": e.label,
                     **_facts(e.baseline, e.memory, e.kv_usage, base.memory if base is not None else None)})
    return rows


def _facts(baseline: bool, m: MemoryInfo, kv: KvUsage | None, bm: MemoryInfo | None) -> dict[str, Any]:
    usage = kv or KvUsage()
    return {
        "baseline": baseline,
        "weights_gib": m.weights_gib,
        "kv_cache_tokens": m.kv_cache_tokens,
        "max_concurrency": m.max_concurrency,
        "max_concurrency_len": m.max_concurrency_len,
        "kv_usage_mean": usage.mean,
        "kv_usage_peak": usage.peak if usage.samples else None,
        "weights_gib_vs_baseline": _diff(m.weights_gib, bm.weights_gib if bm else None),
        "kv_cache_tokens_vs_baseline": _ratio(m.kv_cache_tokens, bm.kv_cache_tokens if bm else None),
        "max_concurrency_vs_baseline": _ratio(m.max_concurrency, bm.max_concurrency if bm else None),
    }


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 4)
