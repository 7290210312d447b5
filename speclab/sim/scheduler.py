"""Continuous batching modelled on vLLM V1's scheduler.

Each step has a token budget (``max_num_batched_tokens``). Running requests go first, in order:
a decoding request costs 1 + its draft tokens, a request still prefilling costs its next chunk.
When the KV cache (16-token blocks) cannot hold a running request's new tokens, the newest
running request is preempted (recompute: it returns to the front of the waiting queue and loses
its KV). Waiting requests are admitted while seats (``max_num_seqs``), budget and KV last, and
not at all in a step that preempted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .memory import BLOCK_SIZE
from .ngram import FloatArray
from .sequence import Seq


@dataclass(slots=True)
class Scheduled:
    seq: Seq
    num_tokens: int  # tokens computed this step (prefill chunk, or 1 + len(drafts))
    computed_before: int
    drafts: list[int]
    qs: list[FloatArray | None]  # q per draft (None: one-hot)
    prefill: bool


DraftFn = Callable[[Seq, int], tuple[list[int], list[FloatArray | None]]]


class Scheduler:
    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, chunked_prefill: bool,
                 kv_tokens: int, num_spec_tokens: int, policy: str = "fcfs") -> None:
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = chunked_prefill
        self.total_blocks = kv_tokens // BLOCK_SIZE
        self.used_blocks = 0
        self.k = num_spec_tokens
        self.policy = policy
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []

    def add(self, seq: Seq) -> None:
        if self.policy == "priority":
            items = sorted([*self.waiting, seq], key=lambda s: (s.req.priority, s.order))
            self.waiting = deque(items)
        else:
            self.waiting.append(seq)

    def remove(self, seq: Seq) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._free(seq)

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // BLOCK_SIZE)

    def _try_allocate(self, seq: Seq, new_tokens: int) -> bool:
        need = self._blocks_for(seq.num_computed + new_tokens) - seq.blocks
        if need > self.total_blocks - self.used_blocks:
            return False
        if need > 0:
            seq.blocks += need
            self.used_blocks += need
        return True

    def _free(self, seq: Seq) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def settle(self, seq: Seq) -> None:
        """After a step: keep only the blocks the computed tokens occupy (rejected drafts free theirs)."""
        keep = self._blocks_for(seq.num_computed)
        if keep < seq.blocks:
            self.used_blocks -= seq.blocks - keep
            seq.blocks = keep

    def _preempt(self, seq: Seq) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.num_computed = 0
        seq.preemptions += 1
        self.waiting.appendleft(seq)

    def _prefill_chunk(self, seq: Seq, budget: int) -> int:
        remaining = len(seq.tokens) - seq.num_computed
        if self.chunked:
            return min(remaining, budget)
        return remaining if remaining <= budget else 0

    def schedule(self, propose: DraftFn, k: int | None = None) -> tuple[list[Scheduled], int]:
        """Pick this step's work with up to ``k`` drafts per decoding sequence (default: K); returns
        it and the number of preemptions it caused."""
        step_k = self.k if k is None else k
        budget = self.budget
        out: list[Scheduled] = []
        preempted = 0
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            drafts: list[int] = []
            qs: list[FloatArray | None] = []
            if seq.decoding:
                n_drafts = min(step_k, budget - 1)
                if n_drafts > 0:
                    drafts, qs = propose(seq, n_drafts)
                n, prefill = 1 + len(drafts), False
            else:
                n, prefill = self._prefill_chunk(seq, budget), True
                if n == 0:
                    i += 1
                    continue
            lost = False  # seq itself was preempted to make room
            while not self._try_allocate(seq, n):
                victim = self.running[-1]
                self._preempt(victim)
                preempted += 1
                if victim is seq:
                    lost = True
                    break
            if lost:
                break
            out.append(Scheduled(seq, n, seq.num_computed, drafts, qs, prefill))
            budget -= n
            i += 1
        while self.waiting and not preempted and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            n = self._prefill_chunk(seq, budget)
            if n == 0 or not self._try_allocate(seq, n):
                break
            self.waiting.popleft()
            self.running.append(seq)
            out.append(Scheduled(seq, n, seq.num_computed, [], [], True))
            budget -= n
        return out, preempted
