"""Per-request acceptance sums against the server's own spec-decode counters.

vLLM 0.33 documents that, summed over n == 1 requests, ``metrics.speculative_decoding`` reconciles
with ``vllm:spec_decode_num_drafts/num_draft_tokens/num_accepted_tokens(_per_pos)``. A gap means
the client mis-parsed counts, the server lies, or requests were lost. Requests in flight at a
scrape boundary cause small transient gaps, so compare totals at the end of a run, and only
requests whose counts are exact (the response's metrics), all of them — warm-up included, since the
server counted those too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from speclab.model.acceptance import add_histogram, steps_accepting_position
from speclab.model.names import CountSource
from speclab.model.records import RequestRecord, ServerSample


@dataclass(frozen=True, slots=True)
class SpecTotals:
    drafts: float = 0.0  # verify steps with drafts (server: num_drafts; client: Σ steps)
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: tuple[float, ...] = ()  # steps whose drafts 0..i were all accepted

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> SpecTotals:
        drafts = draft_tokens = accepted = 0
        positions: list[int] = []
        for record in records:
            spec = record.spec
            if spec.source != CountSource.EXACT.value:
                continue
            drafts += spec.steps
            draft_tokens += spec.drafted
            accepted += spec.accepted
            add_histogram(positions, steps_accepting_position(spec.histogram))
        return cls(float(drafts), float(draft_tokens), float(accepted), tuple(float(n) for n in positions))

    @classmethod
    def from_samples(cls, samples: Iterable[ServerSample]) -> SpecTotals:
        drafts = draft_tokens = accepted = 0.0
        positions: list[float] = []
        for sample in samples:
            if not sample.up:
                continue
            drafts += sample.spec_drafts
            draft_tokens += sample.spec_draft_tokens
            accepted += sample.spec_accepted
            for i, n in enumerate(sample.spec_accepted_per_pos):
                if i >= len(positions):
                    positions.append(0.0)
                positions[i] += n
        return cls(drafts, draft_tokens, accepted, tuple(positions))

    @property
    def empty(self) -> bool:
        return not (self.drafts or self.draft_tokens or self.accepted)


@dataclass(frozen=True, slots=True)
class Comparison:
    variant: str
    quantity: str  # "drafts", "draft_tokens", "accepted", "accepted_pos_<i>"
    client: float
    server: float
    tolerance: float

    @property
    def relative_error(self) -> float:
        scale = max(abs(self.client), abs(self.server), 1.0)
        return abs(self.client - self.server) / scale

    @property
    def ok(self) -> bool:
        return self.relative_error <= self.tolerance

    @property
    def message(self) -> str:
        return (
            f"{self.variant}: {self.quantity} per-request sum {self.client:g} vs server counter "
            f"{self.server:g} ({self.relative_error:.1%} apart, tolerance {self.tolerance:.1%})"
        )


def compare(variant: str, client: SpecTotals, server: SpecTotals, *, tolerance: float = 0.02) -> list[Comparison]:
    """Every comparison for one variant; nothing when neither side saw speculation."""
    if client.empty and server.empty:
        return []
    out = [
        Comparison(variant, "drafts", client.drafts, server.drafts, tolerance),
        Comparison(variant, "draft_tokens", client.draft_tokens, server.draft_tokens, tolerance),
        Comparison(variant, "accepted", client.accepted, server.accepted, tolerance),
    ]
    for i in range(max(len(client.per_position), len(server.per_position))):
        mine = client.per_position[i] if i < len(client.per_position) else 0.0
        theirs = server.per_position[i] if i < len(server.per_position) else 0.0
        out.append(Comparison(variant, f"accepted_pos_{i}", mine, theirs, tolerance))
    return out


def crosscheck(
    records: Iterable[RequestRecord],
    samples: Iterable[ServerSample],
    *,
    tolerance: float = 0.02,
) -> list[Comparison]:
    """All comparisons for every variant seen in records or samples; filter with ``.ok`` for mismatches."""
    by_variant_records: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_variant_records.setdefault(record.variant, []).append(record)
    by_variant_samples: dict[str, list[ServerSample]] = {}
    for sample in samples:
        by_variant_samples.setdefault(sample.variant, []).append(sample)
    out: list[Comparison] = []
    for variant in sorted(set(by_variant_records) | set(by_variant_samples)):
        client = SpecTotals.from_records(by_variant_records.get(variant, []))
        server = SpecTotals.from_samples(by_variant_samples.get(variant, []))
        out.extend(compare(variant, client, server, tolerance=tolerance))
    return out


def mismatches(comparisons: Iterable[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if not c.ok]
