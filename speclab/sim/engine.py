"""The simulator's engine core: ``build_engine(config)`` returns an ``EngineCore``.

One ``step(now)`` schedules work, runs the real models over it, and returns the step's modelled
duration with one output per request that produced tokens. A step has three phases per sequence:
a plain decode (one token sampled from the target, after a prefill or without drafts), a draft
proposal (``proposers``; made while scheduling, since drafts take token budget) and verification
(``verify``: the rejection method checks the drafts against the target). A request with a
structured-output constraint (``grammar``) is masked on both paths as vLLM masks it: the plain
token and every verified position sample from the target's scores with the grammar's mask applied,
drafts are cut to the longest prefix the grammar accepts before the step is charged (drafting
itself stays unconstrained), and a completed value leaves only EOS. The draft length of a
step is K, or under ``num_speculative_tokens_per_batch_size`` the k vLLM's scheduler picks: the
drafts verified in a step were proposed after the previous one, sized by the number of requests
that step scheduled. Timestamps are on the caller's modelled clock: tokens of a step exist at
``now + duration``. Engine faults (``config.faults``) perturb only the speculative path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from speclab.model.speculative import dense_schedule

from .api import (
    DEFAULT_MAX_MODEL_LEN,
    EngineConfig,
    EngineRequest,
    MemoryFacts,
    RequestOutput,
    RequestSpecStats,
    RequestTimes,
    SamplingParams,
    StepResult,
    StepStats,
)
from .errors import RequestRejectedError, SimStartupError
from .grammar import GrammarCompiler, GrammarMatcher, GrammarOptions, apply_mask
from .hardware import gpu_profile
from .lm import SimLM, load_lm
from .memory import plan_memory
from .methods import build_drafting
from .ngram import FloatArray
from .proposers import Proposal, Proposer
from .sampling import adjust, is_greedy, sample
from .scheduler import Scheduled, Scheduler
from .sequence import Seq
from .shapes import MODEL_SHAPES
from .timing import StepTimeModel, StepWork, attention_pairs
from .tokenizer import SimTokenizer, model_dir
from .verify import StandardVerifier, TargetView, Verdict, Verifier, build_verifier
from .wire_faults import ENGINE_FAULTS

KNOWN_FAULTS = tuple(ENGINE_FAULTS)
GRAMMAR_BACKENDS = ("auto", "guidance", "xgrammar", "outlines", "lm-format-enforcer")


class SimEngine:
    """Implements ``speclab.sim.api.EngineCore``."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        model_dir(config.model)
        try:
            gpu = config.gpu_profile or gpu_profile(config.gpu)
        except KeyError as exc:
            raise SimStartupError(str(exc.args[0])) from None
        for fault in config.faults:
            if fault not in KNOWN_FAULTS:
                raise SimStartupError(f"unknown engine fault {fault!r}; known: {', '.join(KNOWN_FAULTS)}")
        self.max_model_len = config.max_model_len or DEFAULT_MAX_MODEL_LEN
        # vLLM checks its scheduler settings before it loads a weight: so does this, before the models.
        if not config.enable_chunked_prefill and config.max_num_batched_tokens < self.max_model_len:
            raise SimStartupError(
                f"max_num_batched_tokens ({config.max_num_batched_tokens}) is smaller than max_model_len "
                f"({self.max_model_len}). This effectively limits the maximum sequence length to "
                "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
                "max_num_batched_tokens or decrease max_model_len.")
        self.target: SimLM = load_lm(config.model)
        self.tokenizer: SimTokenizer = self.target.tokenizer
        self.k = 0  # K: the most drafts a step verifies
        self.proposer: Proposer | None = None
        self.verifier: Verifier = StandardVerifier()
        self.notes: list[str] = []  # start-up warnings (what the configuration means here)
        self._dense: list[int] | None = None  # batch size -> k, when a schedule is set
        draft_shape = None
        head = False
        spec = config.speculative
        if spec is not None:
            self.k = spec.num_speculative_tokens
            if self.k < 1:
                raise SimStartupError("num_speculative_tokens must be at least 1")
            drafting = build_drafting(spec, config.model, self.target, self.max_model_len)
            self.proposer, draft_shape, head = drafting.proposer, drafting.draft_shape, drafting.head
            self.notes = [*spec.notes, *drafting.notes]
            self.verifier = build_verifier(
                spec.rejection_sample_method, rates=spec.synthetic_acceptance_rates, fly_window=spec.fly_window_size,
                fly_threshold=spec.fly_entropy_threshold, fly_top_k=spec.fly_entropy_top_k)
            if spec.per_batch_size is not None:
                self._dense = dense_schedule(spec.per_batch_size, config.max_num_seqs, self.k)
        shape = MODEL_SHAPES[config.model]
        tp, pp = config.tensor_parallel_size, config.pipeline_parallel_size
        self.memory: MemoryFacts = plan_memory(gpu, config.model, shape, draft_shape, tp * pp,
                                               config.gpu_memory_utilization, config.max_num_batched_tokens,
                                               self.max_model_len)
        self.timer = StepTimeModel(gpu, shape, draft_shape, tp, head=head, pp=pp)
        self.scheduler = Scheduler(
            max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
            chunked_prefill=config.enable_chunked_prefill, kv_tokens=self.memory.kv_cache_tokens,
            num_spec_tokens=self.k, policy=config.scheduling_policy)
        self.faults = dict(config.faults)
        self.grammar = GrammarCompiler(self.tokenizer, GrammarOptions(
            disable_any_whitespace=config.disable_any_whitespace,
            disable_additional_properties=config.disable_additional_properties), vocab_size=self.target.vocab_size)
        if config.structured_backend not in GRAMMAR_BACKENDS:
            raise SimStartupError(f"structured_outputs_config.backend: Input should be "
                                  f"{', '.join(repr(b) for b in GRAMMAR_BACKENDS)}, got {config.structured_backend!r}")
        if config.structured_backend not in ("auto", "guidance"):
            self.notes.append(f"structured outputs backend {config.structured_backend!r} is modelled as 'guidance' "
                              "(llguidance): masks, not that backend's speed or its grammar coverage")
        self.notes.extend(f"structured_outputs_config.{key} is accepted but not modelled by speclab-sim"
                          for key in config.structured_not_modelled)
        self._space = self._whitespace_token()
        self._seqs: dict[str, Seq] = {}
        self._aborted: list[RequestOutput] = []
        self._counter = 0
        self._last_batch = 0  # requests the previous step scheduled

    # --- requests -----------------------------------------------------------------------------
    def add_request(self, request: EngineRequest) -> None:
        prompt = list(request.prompt_token_ids)
        params = request.sampling
        if not prompt:
            raise RequestRejectedError("The prompt is empty; at least one token is required.")
        if request.request_id in self._seqs:
            raise RequestRejectedError(f"request id {request.request_id!r} is already running")
        if len(prompt) + params.max_tokens > self.max_model_len:
            raise RequestRejectedError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{len(prompt) + params.max_tokens} tokens ({len(prompt)} in the messages, {params.max_tokens} "
                "in the completion). Please reduce the length of the messages or completion.")
        if params.max_tokens < 1:
            raise RequestRejectedError("max_tokens must be at least 1")
        seed = [params.seed] if params.seed is not None else [self.config.seed, self._counter, 0x5EED]
        seq = Seq(
            req=request, order=self._counter, tokens=prompt, prompt_len=len(prompt),
            rng=np.random.default_rng(seed), target_state=self.target.state(prompt), draft_state=None,
            times=RequestTimes(queued=request.arrival_time),
            spec=RequestSpecStats(num_spec_tokens=self.k, histogram=[0] * (self.k + 1)) if self.k else None,
        )
        if params.structured is not None:
            seq.grammar = self.grammar.compile(params.structured)
            runaway = self.faults.get("runaway", 0.0)
            seq.runaway = bool(self.k and runaway and seq.rng.random() < runaway)
        if self.proposer is not None:
            self.proposer.start(seq)
        self._counter += 1
        self._seqs[request.request_id] = seq
        self.scheduler.add(seq)

    def abort_request(self, request_id: str) -> None:
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            return
        self.scheduler.remove(seq)
        if self.proposer is not None:
            self.proposer.finish(seq)
        self._aborted.append(RequestOutput(request_id, [], True, "abort", None, seq.times, seq.spec,
                                           seq.preemptions, seq.prompt_len))

    def has_unfinished(self) -> bool:
        return bool(self._seqs) or bool(self._aborted)

    # --- stepping -----------------------------------------------------------------------------
    def step_k(self) -> int:
        """This step's draft length: K, or the schedule's k for the previous step's batch size."""
        if self._dense is None:
            return self.k
        batch = min(max(self._last_batch, 1), len(self._dense) - 1)
        return self._dense[batch]

    def step(self, now: float) -> StepResult:
        stats = StepStats(spec_accepted_per_pos=[0] * self.k)
        work, produced = self._run(now, stats, self.step_k())
        outputs: list[RequestOutput] = []
        duration = self.timer.step_time(work)
        end = now + duration
        finished_outputs = self._aborted
        self._aborted = []
        for seq in produced:
            if seq.times.first_token is None:
                seq.times.first_token = end
            seq.times.last_token = end
            out = RequestOutput(seq.req.request_id, seq.pending, seq.finished, seq.finish_reason, seq.stop_reason,
                                num_preemptions=seq.preemptions, prompt_tokens=seq.prompt_len)
            seq.pending = []
            if seq.finished:
                out.times, out.spec = seq.times, seq.spec
                self.scheduler.remove(seq)
                self._seqs.pop(seq.req.request_id, None)
                if self.proposer is not None:
                    self.proposer.finish(seq)
            outputs.append(out)
        stats.running = len(self.scheduler.running)
        stats.waiting = len(self.scheduler.waiting)
        stats.kv_cache_usage = self.scheduler.kv_usage
        return StepResult(duration, finished_outputs + outputs, stats)

    def _whitespace_token(self) -> int:
        ids = self.tokenizer.encode(" ")
        return ids[-1] if ids else self.tokenizer.eos_token_id

    def _propose(self, seq: Seq, k: int) -> Proposal:
        """Phase 2, the draft proposal (called by the scheduler, which charges the drafts to the budget).

        Under a grammar only the longest prefix it accepts is kept, as vLLM's scheduler keeps it.
        """
        if self.proposer is None:
            return [], []
        drafts, qs = self.proposer.propose(seq, k)
        if seq.grammar is not None and drafts:
            n = seq.grammar.validate(drafts)
            drafts, qs = drafts[:n], qs[:n]
        return drafts, qs

    def _run(self, now: float, stats: StepStats, k: int) -> tuple[StepWork, list[Seq]]:
        batch, preempted = self.scheduler.schedule(self._propose, k)
        self._last_batch = len(batch)
        stats.preemptions = preempted
        work = StepWork()
        produced: list[Seq] = []
        proposer = self.proposer
        drafting = proposer is not None and proposer.uses_draft_model
        looking_up = proposer is not None and not drafting and k > 0
        for item in batch:
            seq = item.seq
            if seq.times.scheduled is None:
                seq.times.scheduled = now
            work.tokens += item.num_tokens
            work.kv_read_tokens += item.computed_before + item.num_tokens
            work.attn_pairs += attention_pairs(item.num_tokens, item.computed_before)
            if item.prefill:
                if drafting:
                    work.draft_prefill_tokens += item.num_tokens
                    work.draft_prefill_pairs += attention_pairs(item.num_tokens, item.computed_before)
                seq.num_computed += item.num_tokens
                if seq.num_computed == len(seq.tokens):
                    if seq.times.first_token is None:
                        stats.prompt_tokens += seq.prompt_len
                    self._plain_decode(seq)
            else:
                if drafting and k:
                    work.draft_batch += 1
                    work.draft_kv_tokens += len(seq.tokens)
                elif looking_up:
                    work.lookups += 1
                self._decode(item, stats)
            self.scheduler.settle(seq)
            if seq.pending or seq.finished:
                produced.append(seq)
        if drafting and work.draft_batch:
            work.draft_passes = k
        stats.iteration_tokens = work.tokens
        stats.generation_tokens = sum(len(s.pending) for s in produced)
        return work, produced

    def _plain_decode(self, seq: Seq) -> None:
        """Phase 1: one token from the target, as a non-speculative engine (and a prefill step) samples it."""
        params = seq.req.sampling
        grammar = seq.grammar
        if grammar is None and is_greedy(params):
            token = self.target.greedy(seq.target_state)
        else:
            scores = self.target.scores(seq.target_state)
            if grammar is not None:
                apply_mask(scores, grammar.mask())
            if is_greedy(params):
                token = int(scores.argmax())
            else:
                token = sample(adjust(scores, params.temperature, params.top_k, params.top_p, inplace=True), seq.rng)
        seq.emit(token, self.tokenizer, self.max_model_len)
        if grammar is not None:
            grammar.accept([token])

    def _run_away(self, seq: Seq, n: int) -> bool:
        """The runaway fault: once the value is complete, ``n`` whitespace tokens a step instead of EOS,
        until max_tokens (vLLM issue #55313: trailing spaces under a json_schema, HTTP 200)."""
        if seq.grammar is not None:
            if not seq.grammar.is_accepting():
                return False
            seq.grammar = None
        for _ in range(n):
            if seq.emit(self._space, self.tokenizer, self.max_model_len):
                break
        return True

    def _adjust_for(self, params: SamplingParams) -> Callable[[FloatArray], FloatArray]:
        temperature = params.temperature * (1.0 + self.faults.get("sampling_drift", 0.0))
        return lambda scores: adjust(scores, temperature, params.top_k, params.top_p, inplace=True)

    def _verify(self, item: Scheduled) -> Verdict:
        """Phase 3: the rejection method checks this step's drafts against the target."""
        seq = item.seq
        masks = seq.grammar.verification_masks(item.drafts) if seq.grammar is not None else None
        params = seq.req.sampling
        plain = (params.temperature * (1.0 + self.faults.get("sampling_drift", 0.0)) == 1.0
                 and not 0 < params.top_k < self.target.vocab_size and params.top_p >= 1.0)
        view = TargetView(self.target, seq.target_state, item.drafts, self._adjust_for(params), masks, plain=plain)
        lossy = self.faults.get("lossy_verifier", 0.0)
        force = (lambda: bool(seq.rng.random() < lossy)) if lossy else None
        verdict = None
        try:
            verdict = self.verifier.verify(view, item.drafts, item.qs, is_greedy(seq.req.sampling), seq.rng, force)
            return verdict
        finally:
            view.close(verdict.accepted if verdict is not None else 0)

    def _decode(self, item: Scheduled, stats: StepStats) -> None:
        seq, drafts = item.seq, item.drafts
        seq.num_computed = len(seq.tokens) - 1
        if seq.runaway and self._run_away(seq, 1 + len(drafts)):
            seq.num_computed = len(seq.tokens) - 1
            return
        if not drafts:
            self._plain_decode(seq)
            seq.num_computed = len(seq.tokens) - 1
            return
        verdict = self._verify(item)
        corrupt = self.faults.get("json_corruption", 0.0)
        for j, token in enumerate(verdict.tokens):
            if seq.runaway and token == self.tokenizer.eos_token_id and self._run_away(seq, len(verdict.tokens) - j):
                break
            finished = seq.emit(token, self.tokenizer, self.max_model_len)
            grammar = seq.grammar
            if grammar is not None:
                grammar.accept([token])
            if finished:
                break
            if j < verdict.accepted and corrupt and grammar is not None and self._corrupts(seq, grammar, token, corrupt) \
                    and seq.emit(token, self.tokenizer, self.max_model_len):
                break
        seq.num_computed = len(seq.tokens) - 1
        accepted = verdict.accepted
        spec = seq.spec
        assert spec is not None
        spec.steps += 1
        spec.drafted += len(drafts)
        spec.accepted += accepted
        spec.histogram[accepted] += 1
        spec.per_step_accepted.append(accepted)
        spec.per_step_drafted.append(len(drafts))
        stats.spec_drafts += 1
        stats.spec_draft_tokens += len(drafts)
        stats.spec_accepted += accepted
        for pos in range(accepted):
            stats.spec_accepted_per_pos[pos] += 1

    @staticmethod
    def _corrupts(seq: Seq, grammar: GrammarMatcher, token: int, rate: float) -> bool:
        """The json_corruption fault: an accepted draft committed twice where the grammar forbids it.

        When it fires the sequence loses its grammar, so the broken answer reaches the client as a
        speculative path that commits tokens past the grammar's mask would send it.
        """
        if grammar.is_stopped() or grammar.mask()[token] or not seq.rng.random() < rate:
            return False
        seq.grammar = None
        return True


def build_engine(config: EngineConfig) -> SimEngine:
    """Build the engine for ``config``; SimStartupError (or a subclass) if it cannot start."""
    return SimEngine(config)
