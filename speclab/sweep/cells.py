"""One sweep cell's result, built from the per-epoch block of a run's report.

A cell is one configuration at one load level in one repeat: one config epoch of one variant.
Its per-class blocks are the report's own (acceptance-length distribution, rejection rate,
verifications per request, latency percentiles, throughput, structured-output failures) plus
goodput under the SLOs; its server block reduces the server samples of that epoch's span to the
running batch the cell measured (``vllm:num_requests_running``), KV usage and preemptions.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from speclab.model.errors import InputError
from speclab.model.names import Metric
from speclab.model.records import RequestRecord, ServerSample

from .grid import CellConfig, CellPlan, LoadLevel
from .slo import Slo, goodput_block

ALL = "all"


@dataclass(frozen=True, slots=True)
class Measure:
    name: str
    label: str
    higher_is_better: bool
    read: Callable[[Mapping[str, Any]], float | None]


def _latency(metric: Metric, point: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(block: Mapping[str, Any]) -> float | None:
        value = ((block.get("latency") or {}).get(metric.value) or {}).get(point)
        return None if value is None else float(value)
    return read


def _path(*keys: str) -> Callable[[Mapping[str, Any]], float | None]:
    def read(block: Mapping[str, Any]) -> float | None:
        value: Any = block
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        return None if value is None else float(value)
    return read


def _per_user(block: Mapping[str, Any]) -> float | None:
    tpot = _latency(Metric.TPOT, "p50_ms")(block)
    return None if not tpot else 1000.0 / tpot


MEASURES: dict[str, Measure] = {m.name: m for m in (
    Measure("tpot", "TPOT p50 ms", False, _latency(Metric.TPOT, "p50_ms")),
    Measure("tpot_p99", "TPOT p99 ms", False, _latency(Metric.TPOT, "p99_ms")),
    Measure("ttft_p50", "TTFT p50 ms", False, _latency(Metric.TTFT_CORRECTED, "p50_ms")),
    Measure("ttft_p99", "TTFT p99 ms", False, _latency(Metric.TTFT_CORRECTED, "p99_ms")),
    Measure("e2e_p50", "e2e p50 ms", False, _latency(Metric.E2E_CORRECTED, "p50_ms")),
    Measure("e2e_p99", "e2e p99 ms", False, _latency(Metric.E2E_CORRECTED, "p99_ms")),
    Measure("throughput", "output tokens/s", True, _path("throughput", "output_tokens_per_s")),
    Measure("requests_per_s", "requests/s", True, _path("throughput", "requests_per_s")),
    Measure("goodput", "goodput req/s", True, _path("goodput", "requests_per_s")),
    Measure("per_user", "tokens/s per user", True, _per_user),
    Measure("acceptance_length", "acceptance length", True, _path("acceptance", "acceptance_length_mean")),
    Measure("rejection_rate", "rejection rate", False, _path("acceptance", "rejection_rate")),
    Measure("verifications_per_request", "verifications/request", False,
            _path("acceptance", "verifications_per_request")),
    Measure("structured_failure_rate", "structured failures", False, _path("structured", "failure_rate")),
)}


@dataclass(frozen=True, slots=True)
class ServerSummary:
    """The server's side of a cell: the batch it ran, its KV cache and its preemptions."""

    samples: int
    running_mean: float | None  # over samples with work running: the batch a step saw
    running_p50: float | None
    running_max: float | None
    waiting_mean: float | None
    kv_usage_mean: float | None  # fraction of the KV cache in use
    kv_usage_max: float | None
    preemptions: float

    @property
    def running_batch(self) -> int | None:
        """The measured running batch as a batch size (the schedule's anchor)."""
        return None if self.running_mean is None else max(1, round(self.running_mean))

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)
        return {"samples": self.samples, "running_batch": self.running_batch, "running_mean": r(self.running_mean),
                "running_p50": r(self.running_p50), "running_max": r(self.running_max),
                "waiting_mean": r(self.waiting_mean), "kv_usage_mean": r(self.kv_usage_mean),
                "kv_usage_max": r(self.kv_usage_max), "preemptions": self.preemptions,
                "source": "server_samples (vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:num_preemptions)"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerSummary:
        return cls(int(data["samples"]), data.get("running_mean"), data.get("running_p50"), data.get("running_max"),
                   data.get("waiting_mean"), data.get("kv_usage_mean"), data.get("kv_usage_max"),
                   float(data.get("preemptions") or 0.0))


def summarize_samples(samples: Iterable[ServerSample], variant: str, start_s: float, end_s: float) -> ServerSummary:
    """``variant``'s scrapes within [start_s, end_s] reduced to the cell's server block."""
    chosen = [s for s in samples if s.variant == variant and start_s <= s.t <= end_s and s.up and s.error is None]
    busy = [s.running for s in chosen if s.running > 0]
    kv = [s.kv_usage for s in chosen]
    return ServerSummary(
        samples=len(chosen),
        running_mean=statistics.fmean(busy) if busy else None,
        running_p50=statistics.median(busy) if busy else None,
        running_max=max(busy) if busy else None,
        waiting_mean=statistics.fmean(s.waiting for s in chosen) if chosen else None,
        kv_usage_mean=statistics.fmean(kv) if kv else None,
        kv_usage_max=max(kv) if kv else None,
        preemptions=float(sum(s.preemptions for s in chosen)),
    )


@dataclass(frozen=True, slots=True)
class CellResult:
    """A finished (or failed) cell: ``classes`` are report blocks with ``goodput`` added."""

    plan: CellPlan
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    server: ServerSummary | None = None
    error: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> CellConfig:
        return self.plan.config

    @property
    def load(self) -> LoadLevel:
        return self.plan.load

    @property
    def ok(self) -> bool:
        return self.error is None

    def value(self, prompt_class: str, measure: str) -> float | None:
        block = self.classes.get(prompt_class)
        return None if block is None or not self.ok else MEASURES[measure].read(block)

    def requests(self, prompt_class: str) -> int:
        return int((self.classes.get(prompt_class) or {}).get("requests") or 0)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.plan.id, "phase": self.plan.phase, "repeat": self.plan.repeat,
                "config": self.config.as_dict(), "load": self.load.as_dict(),
                "status": "ok" if self.ok else "failed", "error": self.error, "source": dict(self.source),
                "server": None if self.server is None else self.server.as_dict(), "classes": self.classes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellResult:
        plan = CellPlan(CellConfig.from_dict(data["config"]), LoadLevel.from_dict(data["load"]),
                        int(data.get("repeat", 1)), str(data.get("phase", "grid")))
        server = data.get("server")
        return cls(plan, dict(data.get("classes") or {}), None if server is None else ServerSummary.from_dict(server),
                   data.get("error"), dict(data.get("source") or {}))


def _finish(r: RequestRecord) -> float:
    times = [t for t in (r.done, r.last_token, r.first_token, r.sent) if t is not None]
    return max(times) if times else r.intended


def _records_by_class(records: Iterable[RequestRecord], variant: str, epoch: int | None, start_s: float,
                      end_s: float | None) -> dict[str, list[RequestRecord]]:
    """The epoch's records by class: its epoch number, finished within its span (a record of the old
    epoch finishing after a relaunch began belongs to the transition, as the epoch book places it;
    the span also separates epochs where records carry no epoch number)."""
    out: dict[str, list[RequestRecord]] = {ALL: []}
    for r in records:
        if r.variant != variant or (epoch is not None and getattr(r, "epoch", epoch) != epoch):
            continue
        finish = _finish(r)
        if finish < start_s - 1e-6 or (end_s is not None and finish > end_s + 1e-6):
            continue
        out[ALL].append(r)
        out.setdefault(r.prompt_class, []).append(r)
    return out


def cell_from_epoch(
    plan: CellPlan,
    epoch_block: Mapping[str, Any],
    *,
    variant: str,
    slo: Slo,
    samples: Iterable[ServerSample] | None = None,
    records: Iterable[RequestRecord] | None = None,
    warmup_s: float = 0.0,
    source: Mapping[str, Any] | None = None,
    ends_in_transition: bool = False,
) -> CellResult:
    """A cell from ``report.json``'s ``variants.<variant>.epochs[i]`` block; ``samples`` and ``records``
    are the run's server samples and request records (filtered here to the variant, epoch and span;
    ``ends_in_transition``: a relaunch followed, so records finishing after ``end_s`` are not this
    epoch's). ``warmup_s`` skips the first seconds of the span for the server block."""
    classes = epoch_block.get("classes")
    if not isinstance(classes, Mapping) or ALL not in classes:
        raise InputError(f"cell {plan.id}: the epoch block has no per-class 'classes' with '{ALL}' "
                         "(a report.json from before config epochs?)")
    epoch = epoch_block.get("epoch")
    cut = float(epoch_block["end_s"]) if ends_in_transition and epoch_block.get("end_s") is not None else None
    start0 = float(epoch_block.get("start_s") or 0.0)
    by_class = None if records is None else _records_by_class(records, variant, epoch, start0, cut)
    blocks: dict[str, dict[str, Any]] = {}
    for name, block in classes.items():
        mine = None if by_class is None else by_class.get(name, [])
        blocks[name] = {**block, "goodput": goodput_block(block, slo, mine)}
    start, end = float(epoch_block.get("start_s") or 0.0), float(epoch_block.get("end_s") or 0.0)
    server = None if samples is None else summarize_samples(samples, variant, start + warmup_s, end)
    src = {"variant": variant, "epoch": epoch, "label": epoch_block.get("label"), "settings": epoch_block.get("settings"),
           "start_s": start, "end_s": end, **(source or {})}
    return CellResult(plan, blocks, server, None, src)


def epoch_block(report: Mapping[str, Any], variant: str, epoch: int) -> Mapping[str, Any]:
    """``variants.<variant>.epochs[n]`` of a report.json, by epoch number; InputError naming what is missing."""
    variants = report.get("variants") or {}
    if variant not in variants:
        raise InputError(f"report: no variant {variant!r} (it has {', '.join(variants) or 'none'})")
    blocks: list[Mapping[str, Any]] = variants[variant].get("epochs") or []
    for block in blocks:
        if block.get("epoch") == epoch:
            return block
    raise InputError(f"report: variant {variant!r} has no epoch {epoch}")


def cell_from_report(
    plan: CellPlan,
    report: Mapping[str, Any],
    *,
    variant: str,
    epoch: int,
    slo: Slo,
    samples: Iterable[ServerSample] | None = None,
    records: Iterable[RequestRecord] | None = None,
    warmup_s: float = 0.0,
    source: Mapping[str, Any] | None = None,
) -> CellResult:
    """A cell from a whole ``report.json``: its epoch block, whether a relaunch ended that epoch, and
    how many of the epoch's intervals the client could not keep up in (kept in ``source``)."""
    block = epoch_block(report, variant, epoch)
    ends = any(t.get("variant") == variant and t.get("from_epoch") == epoch for t in report.get("transitions") or ())
    start, end = float(block.get("start_s") or 0.0), float(block.get("end_s") or 0.0)
    saturated = [i for i in (report.get("measurement") or {}).get("saturated_intervals") or () if start < i <= end + 1]
    clock = ((report.get("simulator_clock") or {}).get("variants") or {}).get(variant)
    facts = {"saturated_intervals": len(saturated), "span_intervals": max(1, round(end - start)),
             "report_exit": (report.get("exit") or {}).get("code"), "report_reason": (report.get("exit") or {}).get("reason"),
             "sim_clock": clock, **(source or {})}
    return cell_from_epoch(plan, block, variant=variant, slo=slo, samples=samples, records=records, warmup_s=warmup_s,
                           source=facts, ends_in_transition=ends)


def failed_cell(plan: CellPlan, error: str, source: Mapping[str, Any] | None = None) -> CellResult:
    """A cell whose servers failed: kept in the sweep as failed, never compared."""
    return CellResult(plan, {}, None, error, dict(source or {}))
