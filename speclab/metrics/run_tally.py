"""What a finished run's verdict and acceptance cross-check need, kept as totals while records and
server samples stream past, so the parent holds nothing per request for them.

``speclab run`` judges a run (every request failed? none finished?) and cross-checks the client's
per-request speculative counts against the servers' counters at the end. Both used to read every
record and sample kept in a list for the whole run; the sums here give the same answers
(``crosscheck.crosscheck`` over the same records and samples) in memory bounded by the number of
variants (the report's memory table keeps a KV-usage mean and peak per variant).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from speclab.model.acceptance import add_histogram, steps_accepting_position
from speclab.model.names import CountSource
from speclab.model.records import RequestRecord, ServerSample
from speclab.servers.memory import KvUsage

from .crosscheck import Comparison, SpecTotals, compare


@dataclass(slots=True)
class _Sums:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: list[float] = field(default_factory=list)  # the servers' counters
    positions: list[int] = field(default_factory=list)  # the records' counts

    def totals(self) -> SpecTotals:
        per_position = [float(n) for n in self.positions] if self.positions else self.per_position
        return SpecTotals(self.drafts, self.draft_tokens, self.accepted, tuple(per_position))


@dataclass(slots=True)
class RunTally:
    measured: int = 0  # records outside warm-up
    measured_failed: int = 0
    error_kinds: set[str] = field(default_factory=set)
    first_error: str | None = None  # the first measured failure's message
    kv_usage: dict[str, KvUsage] = field(default_factory=dict)  # per variant, over the scrapes of a live server
    _client: dict[str, _Sums] = field(default_factory=dict)
    _server: dict[str, _Sums] = field(default_factory=dict)

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        for record in records:
            if not record.warmup:
                self.measured += 1
                if record.error_kind is not None:
                    self.measured_failed += 1
                    self.error_kinds.add(str(record.error_kind))
                    if self.first_error is None and record.error_message:
                        self.first_error = record.error_message
            sums = self._client.setdefault(record.variant, _Sums())
            spec = record.spec
            if spec.source != CountSource.EXACT.value:
                continue
            sums.drafts += spec.steps
            sums.draft_tokens += spec.drafted
            sums.accepted += spec.accepted
            add_histogram(sums.positions, steps_accepting_position(spec.histogram))

    def add_samples(self, samples: Iterable[ServerSample]) -> None:
        for sample in samples:
            sums = self._server.setdefault(sample.variant, _Sums())
            if not sample.up:
                continue
            self.kv_usage.setdefault(sample.variant, KvUsage()).add(sample.kv_usage)
            sums.drafts += sample.spec_drafts
            sums.draft_tokens += sample.spec_draft_tokens
            sums.accepted += sample.spec_accepted
            for i, n in enumerate(sample.spec_accepted_per_pos):
                if i >= len(sums.per_position):
                    sums.per_position.append(0.0)
                sums.per_position[i] += n

    @property
    def all_failed(self) -> bool:
        return self.measured > 0 and self.measured_failed == self.measured

    def crosscheck(self, *, tolerance: float = 0.02) -> list[Comparison]:
        """``crosscheck.crosscheck`` over every record and sample seen, from the sums."""
        out: list[Comparison] = []
        for variant in sorted(set(self._client) | set(self._server)):
            client = self._client.get(variant, _Sums()).totals()
            server = self._server.get(variant, _Sums()).totals()
            out.extend(compare(variant, client, server, tolerance=tolerance))
        return out
