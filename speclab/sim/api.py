"""The contract between the simulator's engine core (scheduler, models, step-time) and its server.

The server owns real time: it calls ``EngineCore.step()``, which returns how long the step takes
in *modelled* seconds, and sleeps so that real time follows modelled time. The engine never reads
a clock; tests drive it on a virtual clock by passing ``now`` explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from .grammar.spec import GrammarSpec
from .hardware import GpuProfile

DEFAULT_MAX_MODEL_LEN: Final = 4096  # what the engine and the server use when --max-model-len is not given


@dataclass(slots=True)
class SuffixSettings:
    """vLLM 0.33's suffix-decoding knobs (``suffix_decoding_*``), with its defaults."""

    max_tree_depth: int = 24
    max_cached_requests: int = 10000  # 0: no global tree, prompt trees only
    max_spec_factor: float = 1.0  # at most factor x match length drafts
    min_token_prob: float = 0.1


@dataclass(slots=True)
class SpecConfig:
    method: str  # "draft_model" | "ngram" | "eagle" | "eagle3" | "mtp" | "suffix" ...
    num_speculative_tokens: int  # K: the most drafts a step verifies
    model: str | None = None  # draft model name for draft_model (e.g. "sim-1b"); the head's name for EAGLE
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys vLLM knows that the simulator does not model
    draft_sample_method: str = "greedy"  # "greedy" (argmax, one-hot q) | "probabilistic" (sample q)
    rejection_sample_method: str = "standard"  # "standard" | "block" | "synthetic" | "fly"
    synthetic_acceptance_rates: list[float] | None = None  # unconditional per position (resolved)
    fly_window_size: int | None = None  # resolved: min(6, K-1) unless given
    fly_entropy_threshold: float = 0.3
    fly_entropy_top_k: int = 3
    per_batch_size: list[tuple[int, int, int]] | None = None  # num_speculative_tokens_per_batch_size
    suffix: SuffixSettings = field(default_factory=SuffixSettings)
    use_heterogeneous_vocab: bool = False
    notes: list[str] = field(default_factory=list)  # warnings the server logs at start-up


@dataclass(slots=True)
class EngineConfig:
    model: str  # "sim-0.5b" | "sim-1b" | "sim-8b" | "sim-70b" | "sim-72b"
    speculative: SpecConfig | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    gpu_memory_utilization: float = 0.92
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1  # stages on other nodes: the layers split, a hop per boundary
    seed: int = 0
    gpu: str = "H100"  # step-time profile name
    gpu_profile: GpuProfile | None = None  # a loaded profile file; overrides ``gpu``
    scheduling_policy: str = "fcfs"
    async_scheduling: bool | None = None
    # Engine-level faults: "misaligned_tokenizer" is a model choice (sim-1b-misaligned);
    # "lossy_verifier" (float prob), "sampling_drift" (float), "json_corruption" (float prob per
    # verification step), "runaway" (float prob per constrained request).
    faults: dict[str, float] = field(default_factory=dict)
    # --structured-outputs-config: the keys that change a grammar (vLLM's defaults) and the backend named.
    structured_backend: str = "auto"
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    structured_not_modelled: list[str] = field(default_factory=list)  # keys vLLM takes that change nothing here


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: disabled
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    structured: GrammarSpec | None = None  # response_format / structured_outputs, checked as vLLM checks it


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    arrival_time: float  # modelled clock (seconds)
    priority: int = 0


@dataclass(slots=True)
class RequestTimes:
    """Engine-core timestamps on the modelled clock (vLLM's QUEUED/SCHEDULED/first/last token)."""

    queued: float
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None


@dataclass(slots=True)
class RequestSpecStats:
    num_spec_tokens: int
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)  # len k+1
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RequestOutput:
    """What one engine step produced for one request (all tokens of that step)."""

    request_id: str
    new_token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None
    times: RequestTimes | None = None  # set when finished
    spec: RequestSpecStats | None = None  # set when finished and speculation is on
    num_preemptions: int = 0  # the request's preemptions so far (a running total, not per step)
    prompt_tokens: int = 0


@dataclass(slots=True)
class StepStats:
    """Engine-wide figures of one step, for /metrics."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0  # 0..1
    preemptions: int = 0  # preemptions during this step
    prompt_tokens: int = 0  # prompts whose prefill completed this step (once per request, as vLLM counts)
    generation_tokens: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    iteration_tokens: int = 0


@dataclass(slots=True)
class StepResult:
    duration: float  # modelled seconds this step takes
    outputs: list[RequestOutput]
    stats: StepStats


@dataclass(slots=True)
class MemoryFacts:
    """What vLLM's start-up log states; the simulator models them."""

    weights_gib: float
    draft_weights_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    max_concurrency: float  # for max_model_len tokens per request
    gpu_memory_gib: float
    num_gpus: int


class Tokenizer(Protocol):
    eos_token_id: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def apply_chat_template(self, messages: list[dict[str, str]]) -> str: ...


class EngineCore(Protocol):
    config: EngineConfig
    tokenizer: Tokenizer
    memory: MemoryFacts

    def add_request(self, request: EngineRequest) -> None: ...
    def abort_request(self, request_id: str) -> None: ...
    def has_unfinished(self) -> bool: ...
    def step(self, now: float) -> StepResult: ...
