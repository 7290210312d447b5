"""Per-request records, server samples and events: what traffic, scraper and session produce.

Timestamps are seconds on the run's monotonic clock (``time.monotonic() - run_start``), which is
shared by every process on the host; the recording manifest carries the wall-clock start.
Plain dataclasses (not pydantic): records are created on the load generator's hot path.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from . import acceptance


@dataclass(slots=True)
class SpecCounts:
    """Speculative decoding counts of one request (docs/measurements.md)."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # [j] = steps that accepted exactly j drafts
    num_spec_tokens: int = 0  # k
    source: str = "none"  # CountSource value
    # [i] = verify steps that drafted position i, where the server said (vLLM's detailed
    # per-step counts); empty otherwise, and derived from the sums (model.acceptance).
    drafted_per_position: list[int] = field(default_factory=list)
    # [[drafts a step verified (the k used), steps, accepted], ...] from the server's per-step counts
    # (vLLM's "detailed" mode); empty where it gave only sums.
    per_k: list[list[int]] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float | None:
        return acceptance.acceptance_length(self.steps, self.accepted)

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance.acceptance_rate(self.accepted, self.drafted)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    variant: str
    prompt_class: str
    intended: float
    sent: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    done: float | None = None
    warmup: bool = False
    epoch: int = 1  # the variant's config epoch the request was sent to (docs/measurements.md, "Config epochs")
    worker: int = 0
    chunks: int = 0  # SSE events that carried output (tokens or text)
    token_reads: int = 0  # socket reads that carried output: chunks a proxy merged count once
    prompt_tokens: int = 0
    output_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    finish_reason: str | None = None
    # From the response's per-request `metrics` (milliseconds); None where the server lacks them.
    server_queue_ms: float | None = None
    server_prefill_ms: float | None = None
    server_decode_ms: float | None = None
    spec: SpecCounts = field(default_factory=SpecCounts)
    schema_valid: bool | None = None  # None: the request had no schema
    error_kind: str | None = None  # ErrorKind value
    error_message: str | None = None
    http_status: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # exactly what was sent
    # What was asked, for refire and output matching: {"prompt": str} or {"messages": [...]},
    # plus "endpoint" ("chat" | "completions"), "index" (position in the plan), optional "schema".
    prompt: dict[str, Any] = field(default_factory=dict)
    # Through a gateway: the tenant and route (URL path) it was sent as, and the backend that
    # answered (the gateway's X-Speclab-Backend response header); None when not known.
    tenant: str | None = None
    route: str | None = None
    backend: str | None = None
    # Where logprobs were asked for: per output token {"token": text, "logprob": float, "top": {text: logprob}}.
    output_logprobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error_kind is None and self.done is not None

    @property
    def schedule_lag(self) -> float | None:
        return None if self.sent is None else self.sent - self.intended

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None or self.sent is None else self.first_token - self.sent

    @property
    def ttft_corrected(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.intended

    @property
    def e2e(self) -> float | None:
        return None if self.done is None or self.sent is None else self.done - self.sent

    @property
    def e2e_corrected(self) -> float | None:
        return None if self.done is None else self.done - self.intended

    @property
    def tpot(self) -> float | None:
        if self.first_token is None or self.last_token is None or self.output_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        spec = values.get("spec")
        values["spec"] = SpecCounts(**spec) if isinstance(spec, dict) else SpecCounts()
        return cls(**values)


@dataclass(slots=True)
class ServerSample:
    """One scrape of a server's /metrics, as deltas since the previous scrape (gauges as read)."""

    t: float
    variant: str
    up: bool = True
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    requests_finished: float = 0.0
    spec_drafts: float = 0.0
    spec_draft_tokens: float = 0.0
    spec_accepted: float = 0.0
    spec_accepted_per_pos: list[float] = field(default_factory=list)
    # Histogram deltas by series name (e.g. "vllm:request_queue_time_seconds"):
    # list of (upper bound in seconds, count in that bucket, non-cumulative), plus sum and count.
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock_drift_s: float | None = None  # the simulator's own health gauge
    sim_steps: float = 0.0  # the simulator's engine steps since the previous scrape
    sim_step_s: float = 0.0  # their modelled seconds (sim_step_s / sim_steps: the mean modelled step)
    sim_drift_s: float = 0.0  # their summed lateness (sim_drift_s / sim_steps: the mean drift of a step)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the +Inf bucket bound is written as the string "+Inf", as Prometheus does."""
        data = asdict(self)
        for hist in data["histograms"].values():
            if "buckets" in hist:
                hist["buckets"] = [[_bound_out(le), n] for le, n in hist["buckets"]]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSample:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for hist in (values.get("histograms") or {}).values():
            if "buckets" in hist:
                hist["buckets"] = [(_bound_in(le), n) for le, n in hist["buckets"]]
        return cls(**values)


def _bound_out(le: float | str) -> float | str:
    return "+Inf" if isinstance(le, float) and math.isinf(le) else le


def _bound_in(le: float | str) -> float:
    return math.inf if le == "+Inf" else float(le)


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened during a run: relaunch, config change, fault, pause, warning."""

    t: float
    kind: str
    message: str
    variant: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        return cls(
            t=float(data["t"]),
            kind=str(data["kind"]),
            message=str(data.get("message", "")),
            variant=data.get("variant"),
            data=dict(data.get("data") or {}),
        )
