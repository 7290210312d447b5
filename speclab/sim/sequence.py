"""One request inside the engine: its tokens, model states, RNG, KV position and stop rules."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .api import EngineRequest, RequestSpecStats, RequestTimes
from .grammar.matcher import GrammarMatcher
from .lm import ContextState
from .tokenizer import SimTokenizer


@dataclass(eq=False)
class Seq:
    req: EngineRequest
    order: int  # arrival order, for fcfs and preemption choice
    tokens: list[int]  # prompt + output
    prompt_len: int
    rng: np.random.Generator
    target_state: ContextState
    draft_state: ContextState | None
    times: RequestTimes
    spec: RequestSpecStats | None
    num_computed: int = 0  # tokens whose KV is in the cache
    blocks: int = 0  # KV blocks held
    preemptions: int = 0
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    grammar: GrammarMatcher | None = None  # the request's constraint, advanced by every committed token
    runaway: bool = False  # the runaway fault: whitespace after the value until max_tokens
    pending: list[int] = field(default_factory=list)  # tokens produced this step
    draft_base: int = 0  # a draft model's state matches ``tokens`` up to here (its last drafts follow)

    @property
    def output(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def decoding(self) -> bool:
        return self.num_computed == len(self.tokens) - 1 and self.num_output > 0

    def emit(self, token: int, tokenizer: SimTokenizer, max_model_len: int) -> bool:
        """Append one sampled token and apply the stop rules; True when the request is finished."""
        self.tokens.append(token)
        state, n = self.target_state, len(self.tokens)
        if len(state) < n:
            state.push(token)
        elif state.tokens[n - 1] != token:  # verification left other drafts there
            state.truncate(n - 1)
            state.push(token)
        self.pending.append(token)
        params = self.req.sampling
        if token == tokenizer.eos_token_id and not params.ignore_eos:
            return self._finish("stop", None)
        if token in params.stop_token_ids:
            return self._finish("stop", token)
        if params.stop:
            longest = max(len(s) for s in params.stop)
            tail = tokenizer.decode(self.output[-(longest + 2):])
            newest = tokenizer.decode([token])
            for stop in params.stop:
                at = tail.find(stop)
                if at >= 0 and at + len(stop) > len(tail) - len(newest):
                    return self._finish("stop", stop)
        if self.num_output >= params.max_tokens or len(self.tokens) >= max_model_len:
            return self._finish("length", None)
        return False

    def _finish(self, reason: str, stop_reason: str | int | None) -> bool:
        self.finished, self.finish_reason, self.stop_reason = True, reason, stop_reason
        return True
