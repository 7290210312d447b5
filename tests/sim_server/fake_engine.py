"""A small deterministic engine implementing speclab.sim.api.EngineCore, for server tests.

It is not a model of anything: a byte tokenizer, a fixed text to emit, and a seeded draft that
accepts a random number of tokens per step. It lets the server's wire format, clock and faults
be tested without the real engine core.
"""

from __future__ import annotations

import random

from speclab.sim.api import (
    EngineConfig,
    EngineRequest,
    MemoryFacts,
    RequestOutput,
    RequestSpecStats,
    RequestTimes,
    StepResult,
    StepStats,
    Tokenizer,
)

TEXT = "The quick brown fox jumps over the lazy dog. "
WEIGHTS_GIB = {"sim-0.5b": 0.93, "sim-1b": 2.3, "sim-8b": 14.96, "sim-70b": 131.4}


class SimStartupError(Exception):
    pass


class ModelDoesNotFitError(SimStartupError):
    pass


class UnknownModelError(SimStartupError):
    pass


class ByteTokenizer:
    eos_token_id = 0

    def encode(self, text: str) -> list[int]:
        return [b + 1 for b in text.encode()]

    def decode(self, ids: list[int]) -> str:
        return bytes(i - 1 for i in ids if i > 0).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


class _Req:
    def __init__(self, req: EngineRequest, k: int) -> None:
        self.req = req
        self.times = RequestTimes(queued=req.arrival_time)
        self.out: list[int] = []
        self.spec = RequestSpecStats(num_spec_tokens=k, histogram=[0] * (k + 1)) if k else None
        self.rng = random.Random(req.sampling.seed if req.sampling.seed is not None else hash(req.request_id))


class FakeEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.tokenizer: Tokenizer = ByteTokenizer()
        self.k = config.speculative.num_speculative_tokens if config.speculative else 0
        if config.max_model_len is None:
            config.max_model_len = 4096
        weights = WEIGHTS_GIB[config.model]
        gpu_gib = 80.0 * config.tensor_parallel_size * config.gpu_memory_utilization
        kv_gib = gpu_gib - weights - 2.0
        kv_tokens = int(kv_gib * 1024**3 / (128 * 1024))
        self.memory = MemoryFacts(weights_gib=weights, draft_weights_gib=2.3 if self.k else 0.0,
                                  kv_cache_gib=kv_gib, kv_cache_tokens=kv_tokens,
                                  max_concurrency=kv_tokens / config.max_model_len, gpu_memory_gib=80.0,
                                  num_gpus=config.tensor_parallel_size)
        self._waiting: list[_Req] = []
        self._running: list[_Req] = []

    def add_request(self, request: EngineRequest) -> None:
        self._waiting.append(_Req(request, self.k))

    def abort_request(self, request_id: str) -> None:
        self._waiting = [r for r in self._waiting if r.req.request_id != request_id]
        self._running = [r for r in self._running if r.req.request_id != request_id]

    def has_unfinished(self) -> bool:
        return bool(self._waiting or self._running)

    def step(self, now: float) -> StepResult:
        stats = StepStats(spec_accepted_per_pos=[0] * self.k)
        while self._waiting and len(self._running) < self.config.max_num_seqs:
            self._running.append(self._waiting.pop(0))
        tokens = 0
        emitted: list[tuple[_Req, list[int]]] = []
        for r in self._running:
            if r.times.scheduled is None:
                r.times.scheduled = now
                stats.prompt_tokens += len(r.req.prompt_token_ids)
                tokens += len(r.req.prompt_token_ids)
                n = 1
            elif self.k:
                accepted = r.rng.randint(0, self.k)
                assert r.spec is not None
                r.spec.steps += 1
                r.spec.drafted += self.k
                r.spec.accepted += accepted
                r.spec.histogram[accepted] += 1
                r.spec.per_step_accepted.append(accepted)
                r.spec.per_step_drafted.append(self.k)
                stats.spec_drafts += 1
                stats.spec_draft_tokens += self.k
                stats.spec_accepted += accepted
                for pos in range(accepted):
                    stats.spec_accepted_per_pos[pos] += 1
                n = accepted + 1
                tokens += self.k + 1
            else:
                n = 1
                tokens += 1
            remaining = r.req.sampling.max_tokens - len(r.out)
            new = [TEXT.encode()[(len(r.out) + i) % len(TEXT)] + 1 for i in range(min(n, remaining))]
            emitted.append((r, new))
        duration = 0.004 + 0.00002 * tokens
        end = now + duration
        outputs: list[RequestOutput] = []
        for r, new in emitted:
            stop_id = next((t for t in new if t in r.req.sampling.stop_token_ids), None)
            if stop_id is not None:
                new = new[: new.index(stop_id) + 1]
            r.out.extend(new)
            stats.generation_tokens += len(new)
            r.times.first_token = r.times.first_token if r.times.first_token is not None else end
            r.times.last_token = end
            finished = stop_id is not None or len(r.out) >= r.req.sampling.max_tokens
            reason = "stop" if stop_id is not None else "length"
            outputs.append(RequestOutput(
                r.req.request_id, new, finished=finished, finish_reason=reason if finished else None,
                stop_reason=stop_id, times=r.times if finished else None, spec=r.spec if finished else None,
                prompt_tokens=len(r.req.prompt_token_ids)))
            if finished:
                self._running.remove(r)
        stats.running = len(self._running)
        stats.waiting = len(self._waiting)
        stats.iteration_tokens = tokens
        stats.kv_cache_usage = min(1.0, sum(len(r.req.prompt_token_ids) + len(r.out) for r in self._running)
                                   / self.memory.kv_cache_tokens)
        return StepResult(duration=duration, outputs=outputs, stats=stats)


def build_fake_engine(config: EngineConfig) -> FakeEngine:
    if config.model not in WEIGHTS_GIB:
        raise UnknownModelError(f"Unknown model {config.model!r}; choose one of {', '.join(WEIGHTS_GIB)}")
    needed = WEIGHTS_GIB[config.model] + (2.3 if config.speculative else 0.0)
    have = 80.0 * config.tensor_parallel_size * config.gpu_memory_utilization
    if needed > have:
        raise ModelDoesNotFitError(
            f"Tried to allocate {needed:.2f} GiB for the weights; GPU 0 has a total capacity of 79.19 GiB")
    return FakeEngine(config)
