"""What a finished run's verdict, acceptance cross-check and memory table need, kept as totals while
records, server samples and events stream past, so the parent holds nothing per request for them.

``speclab run`` judges a run (every request failed? none finished?) and cross-checks the client's
per-request speculative counts against the servers' counters at the end. Both used to read every
record and sample kept in a list for the whole run; the sums here give the same answers
(``crosscheck.crosscheck`` over the same records and samples, per config epoch) in memory bounded by
the number of variants and epochs.

Nothing is summed across epochs (docs/measurements.md, "Config epochs"). The cross-check compares
each epoch's server with the requests it served: a server sample counts in the epoch its variant
was in when it was taken (during a transition, the ending one, as the aggregator's server timing),
a record in the epoch whose server served it. Across a relaunch on one port, the ending server is
read once more as its transition begins and then stops; what it served after that read is in
neither epoch (its counters were never read again), and what the new server served once it had
taken over, before its epoch began (requests that waited for it), is the new epoch's on both sides,
though the epochs' accounting places those requests in the transition. As at any read, requests in
flight across one can leave a small gap. KV usage leaves the transitions out (a stopping or freshly
started server is no measure of the epoch), and each epoch keeps the server it ran on, remembered
when its transition begins (the running server stands for the current epoch), so the memory table
pairs that server's facts with that epoch's use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from speclab.model.acceptance import add_histogram, steps_accepting_position
from speclab.model.epochs import RELAUNCH_EVENT, TRANSITION_EVENT
from speclab.model.names import CountSource
from speclab.model.records import Event, RequestRecord, ServerSample
from speclab.servers.memory import EpochMemory, HasMemory, KvUsage, MemoryInfo, epoch_memory_table

from .cells import finish_time
from .crosscheck import Comparison, SpecTotals, compare
from .epochs import EpochBook

EpochKey = tuple[str, int]  # (variant, epoch)


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


@dataclass(frozen=True, slots=True)
class EpochCheck:
    """One cross-check comparison of one (variant, epoch); ``check`` is made under the epoch's
    label, so its message names the epoch (the variant's name alone for a first epoch)."""

    variant: str
    epoch: int
    label: str
    check: Comparison


@dataclass(slots=True)
class RunTally:
    """``book`` says which epoch a server sample belongs to (the aggregator's, in a live run); a
    tally without one sees every variant in its first epoch."""

    book: EpochBook = field(default_factory=EpochBook)
    measured: int = 0  # records outside warm-up
    measured_failed: int = 0
    error_kinds: set[str] = field(default_factory=set)
    first_error: str | None = None  # the first measured failure's message
    kv_usage: dict[EpochKey, KvUsage] = field(default_factory=dict)  # over the scrapes within each epoch
    ran_on: dict[EpochKey, HasMemory] = field(default_factory=dict)  # the server of each ended epoch
    _client: dict[EpochKey, _Sums] = field(default_factory=dict)
    _server: dict[EpochKey, _Sums] = field(default_factory=dict)
    _last_read: dict[EpochKey, float] = field(default_factory=dict)  # an ended epoch's server's last read
    _serves_from: dict[EpochKey, float] = field(default_factory=dict)  # when a relaunched epoch's server took over
    _pending: dict[str, list[RequestRecord]] = field(default_factory=dict)  # finished in a transition still open

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        self._settle()
        for record in records:
            if not record.warmup:
                self.measured += 1
                if record.error_kind is not None:
                    self.measured_failed += 1
                    self.error_kinds.add(str(record.error_kind))
                    if self.first_error is None and record.error_message:
                        self.first_error = record.error_message
            self._client.setdefault((record.variant, record.epoch), _Sums())
            if record.spec.source != CountSource.EXACT.value:
                continue
            transition = self.book.ending(record)
            if transition is not None and transition.end_s is None:
                self._pending.setdefault(record.variant, []).append(record)  # which server served it: known at its end
            else:
                self._count(record)

    def _count(self, record: RequestRecord) -> None:
        """Into the sums of the epoch whose server served ``record``: the one it was sent to (up to
        that server's last read, in the transition that ended it), the next once the next server had
        taken over, and neither in between (the ending server served it after its last read)."""
        epoch: int | None = record.epoch
        transition = self.book.ending(record)
        finished = finish_time(record)
        if transition is not None and finished > self._last_read.get((record.variant, record.epoch), transition.start_s):
            took_over = self._serves_from.get((record.variant, transition.to_epoch))
            epoch = transition.to_epoch if took_over is not None and finished > took_over else None
        if epoch is None:
            return
        sums = self._client.setdefault((record.variant, epoch), _Sums())
        spec = record.spec
        sums.drafts += spec.steps
        sums.draft_tokens += spec.drafted
        sums.accepted += spec.accepted
        add_histogram(sums.positions, steps_accepting_position(spec.histogram))

    def _settle(self, *, all_: bool = False) -> None:
        """Count the records held while their transition was open, once it is over (``all_``: the run
        is, whatever state it ended in)."""
        for variant in [v for v in self._pending if all_ or not self.book.in_transition(v)]:
            for record in self._pending.pop(variant):
                self._count(record)

    def add_samples(self, samples: Iterable[ServerSample]) -> None:
        self._settle()
        for sample in samples:
            key = (sample.variant, self.book.current(sample.variant))
            transition = self.book.open_transition(sample.variant)
            if sample.up and transition is not None and sample.t >= transition.start_s:
                if key in self._last_read:  # the new server, before its epoch began: its epoch's work
                    key = (sample.variant, transition.to_epoch)
                self._last_read.setdefault((sample.variant, transition.from_epoch), sample.t)  # the ending server's
            elif sample.up:
                self.kv_usage.setdefault(key, KvUsage()).add(sample.kv_usage)
            sums = self._server.setdefault(key, _Sums())
            if not sample.up:
                continue
            sums.drafts += sample.spec_drafts
            sums.draft_tokens += sample.spec_draft_tokens
            sums.accepted += sample.spec_accepted
            for i, n in enumerate(sample.spec_accepted_per_pos):
                if i >= len(sums.per_position):
                    sums.per_position.append(0.0)
                sums.per_position[i] += n

    def add_event(self, event: Event, running: Mapping[str, HasMemory]) -> None:
        """At a transition, remember the server the ending epoch ran on (``running`` still holds
        it: the relaunch replaces it afterwards). A retried relaunch keeps the first."""
        if event.kind == TRANSITION_EVENT and event.variant and event.variant in running:
            self.ran_on.setdefault((event.variant, self.book.current(event.variant)), running[event.variant])
        stopped = event.data.get("old_stopped_s") if event.kind == RELAUNCH_EVENT and event.variant else None
        if isinstance(stopped, int | float) and isinstance(event.data.get("epoch"), int):
            self._serves_from[(str(event.variant), int(event.data["epoch"]))] = float(stopped)

    @property
    def all_failed(self) -> bool:
        return self.measured > 0 and self.measured_failed == self.measured

    def crosscheck(self, *, tolerance: float = 0.02) -> list[Comparison]:
        """``crosscheck.crosscheck`` over every record and sample seen, from the sums, per epoch."""
        return [c.check for c in self.crosscheck_epochs(tolerance=tolerance)]

    def crosscheck_epochs(self, *, tolerance: float = 0.02) -> list[EpochCheck]:
        """Every comparison of every (variant, epoch) seen, in that order."""
        self._settle(all_=True)
        out: list[EpochCheck] = []
        for variant, epoch in sorted(set(self._client) | set(self._server)):
            client = self._client.get((variant, epoch), _Sums()).totals()
            server = self._server.get((variant, epoch), _Sums()).totals()
            label = self.book.label(variant, epoch)
            out.extend(EpochCheck(variant, epoch, label, c) for c in compare(label, client, server, tolerance=tolerance))
        return out

    def memory_rows(self, running: Mapping[str, HasMemory]) -> list[dict[str, Any]]:
        """``epoch_memory_table`` of every epoch of every running variant: an ended epoch with the
        server remembered at its transition, the current one with the running server."""
        epochs = []
        for name, server in running.items():
            infos = self.book.epochs(name)
            for info in infos:
                ran = self.ran_on.get((name, info.epoch)) or (server if info is infos[-1] else None)
                epochs.append(EpochMemory(name, info.epoch, info.label or name, info.start_s,
                                          ran.baseline if ran is not None else server.baseline,
                                          ran.memory if ran is not None else MemoryInfo(),
                                          self.kv_usage.get((name, info.epoch))))
        return epoch_memory_table(epochs)
