"""The lab file (`labs/*.toml`): target + draft pairing, server defaults and variants.

A lab names the target and draft (with their simulator stand-ins, so one file serves vLLM and
the simulator), binds them as a released pair, sets server defaults and lists variants: one
non-speculative baseline and speculative variants with their draft length k. Validation here
catches what vLLM would only refuse at start-up (an explicit async scheduling with a CPU n-gram
drafter, over-committed GPU memory on a shared GPU), so a bad lab fails before anything launches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import limits as L
from .gateway import GatewaySection
from .spec_options import SPEC_OPTION_KEYS, SpecOptions, SuffixOptions
from .vllm_flags import NOT_EXTRA, REMOVED, SHORT_ALIASES

DraftMethod = Literal["draft_model", "eagle", "eagle3", "ngram", "mtp", "suffix"]
Topology = Literal["separate", "shared"]
SchedulingPolicy = Literal["fcfs", "priority"]
SimGpu = Literal["H100", "H200", "A100", "L4"]  # the simulator's GPU profiles (speclab/sim/hardware.py)

# Methods whose drafter is a separate checkpoint that must be named (and paired with the target).
METHODS_WITH_DRAFT_MODEL: frozenset[str] = frozenset({"draft_model", "eagle", "eagle3"})
# Methods whose drafter is a head reading the target's hidden state (the simulator models it from the target).
HEAD_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "mtp"})
# vLLM 0.33 refuses an explicit --async-scheduling with these (CPU drafters on the V1 runner).
METHODS_WITHOUT_ASYNC: frozenset[str] = frozenset({"ngram", "suffix"})
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# Settings `relaunch` may change on one variant while the others keep serving.
RELAUNCH_KEYS: frozenset[str] = frozenset(
    {"num_speculative_tokens", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", *SPEC_OPTION_KEYS}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Target(_Strict):
    model: str = Field(min_length=1)
    revision: str | None = None
    sim_model: str = Field(min_length=1)
    tokenizer: str | None = None  # local path to a tokenizer dir or tokenizer.json (hashed for pairing)


class Draft(_Strict, SuffixOptions):
    method: DraftMethod
    model: str | None = None
    revision: str | None = None
    sim_model: str | None = None
    tokenizer: str | None = None
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=L.MAX_PROMPT_LOOKUP)
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=L.MAX_PROMPT_LOOKUP)
    # vLLM 0.33 refuses a draft_model whose vocab size differs from the target's unless this is set
    # (it then drafts greedily over the tokens both vocabularies share).
    use_heterogeneous_vocab: bool = False

    @model_validator(mode="after")
    def _check(self) -> Draft:
        if self.use_heterogeneous_vocab and self.method != "draft_model":
            raise ValueError(f"use_heterogeneous_vocab: only method 'draft_model' can use it (vLLM 0.33 refuses it "
                             f"with {self.method!r})")
        if self.method in METHODS_WITH_DRAFT_MODEL and not self.model:
            raise ValueError(f"model: method {self.method!r} needs a draft model; set draft.model (and draft.sim_model)")
        if self.model and not self.sim_model and self.method == "draft_model":
            raise ValueError(f"sim_model: draft.model {self.model!r} needs a simulator stand-in, e.g. 'sim-1b'")
        if self.sim_model and self.method in HEAD_METHODS:
            raise ValueError(f"sim_model: method {self.method!r} drafts with a head on the target's own state; the "
                             "simulator builds it from target.sim_model, so remove draft.sim_model")
        if self.method != "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min: prompt_lookup_min/max apply only to method 'ngram'")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min: {lo} must be <= prompt_lookup_max ({hi})")
        self.check_suffix_options(self.method)
        return self


class Pair(_Strict):
    """The released pair: the target and draft checkpoints (and tokenizers) that ship together."""

    target_model: str
    target_revision: str
    draft_model: str
    draft_revision: str
    target_tokenizer_sha256: str | None = None
    draft_tokenizer_sha256: str | None = None
    note: str | None = None


class _Settings(_Strict):
    """Server settings a variant may override (None = take the lab's [server] value)."""

    max_num_seqs: int | None = Field(default=None, ge=1, le=L.MAX_NUM_SEQS)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=L.MAX_BATCHED_TOKENS)
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    scheduling_policy: SchedulingPolicy | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    max_model_len: int | None = Field(default=None, ge=1, le=L.MAX_MODEL_LEN)
    stream_interval: int | None = Field(default=None, ge=1, le=L.MAX_STREAM_INTERVAL)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _extra_args_checked(self) -> _Settings:
        for arg in self.extra_args:
            flag = arg.split("=", 1)[0]
            flag = SHORT_ALIASES.get(flag, flag)
            if flag in REMOVED:
                raise ValueError(f"extra_args: {flag} was removed from vLLM; use --speculative-config keys instead")
            if flag in NOT_EXTRA:
                raise ValueError(f"extra_args: {arg.split('=', 1)[0]}: {NOT_EXTRA[flag]}")
        return self


class ServerDefaults(_Settings):
    tensor_parallel_size: int = Field(default=1, ge=1, le=L.MAX_TENSOR_PARALLEL)
    # Multi-node vLLM: pipeline stages over a Ray cluster (--distributed-executor-backend ray)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=L.MAX_TENSOR_PARALLEL)
    distributed_executor_backend: Literal["ray", "mp"] | None = None
    topology: Topology = "separate"
    gpus: list[Annotated[int, Field(ge=0, le=L.MAX_GPU_INDEX)]] | None = None
    sim_gpu: SimGpu = "H100"
    base_port: int | None = Field(default=None, ge=1024, le=65535)
    seed: int = Field(default=0, ge=L.SEED_MIN, le=L.SEED_MAX)
    api_key_env: str | None = None


class Variant(_Settings, SpecOptions):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    speculative: bool = True
    num_speculative_tokens: int | None = Field(default=None, ge=1, le=L.MAX_SPEC_TOKENS)
    sim_faults: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_k(self) -> Variant:
        if self.speculative and self.num_speculative_tokens is None:
            raise ValueError(f"num_speculative_tokens: variant {self.name!r} is speculative; set k >= 1")
        if not self.speculative and self.num_speculative_tokens is not None:
            raise ValueError(f"num_speculative_tokens: variant {self.name!r} is the baseline (speculative = false); remove it")
        self.check_spec_options(self.name, self.speculative, self.num_speculative_tokens)
        return self


class Effective(BaseModel):
    """One variant's settings after merging the lab's [server] defaults and the variant's overrides."""

    model_config = ConfigDict(frozen=True)

    variant: str
    speculative: bool
    num_speculative_tokens: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    enable_chunked_prefill: bool | None
    async_scheduling: bool | None
    scheduling_policy: str | None
    gpu_memory_utilization: float | None
    max_model_len: int | None
    stream_interval: int | None
    tensor_parallel_size: int
    seed: int
    gpus: tuple[int, ...]
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    sim_gpu: str
    extra_args: tuple[str, ...]
    env: dict[str, str]
    sim_faults: tuple[str, ...]
    spec_options: dict[str, Any] = Field(default_factory=dict)  # more --speculative-config keys


class Lab(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    target: Target
    draft: Draft | None = None
    pair: Pair | None = None
    server: ServerDefaults = Field(default_factory=ServerDefaults)
    variants: list[Variant] = Field(min_length=1)
    gateway: GatewaySection = Field(default_factory=GatewaySection)

    @model_validator(mode="after")
    def _check(self) -> Lab:
        names = [v.name for v in self.variants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variants: duplicate variant name(s) {', '.join(dupes)}")
        if not any(not v.speculative for v in self.variants):
            raise ValueError("variants: no baseline; add a variant with speculative = false")
        speculative = [v.name for v in self.variants if v.speculative]
        if speculative and self.draft is None:
            raise ValueError(f"draft: variants {', '.join(speculative)} are speculative but the lab has no [draft] section")
        for v in self.variants:
            if self.draft is not None and v.speculative:
                v.check_with_draft(v.name, self.draft.method, self.draft.use_heterogeneous_vocab)
        if self.draft is not None and self.draft.method in METHODS_WITHOUT_ASYNC:
            for i, v in enumerate(self.variants):
                if v.speculative and (v.async_scheduling or (v.async_scheduling is None and self.server.async_scheduling)):
                    raise ValueError(
                        f"variants[{i}].async_scheduling: vLLM 0.33 refuses async scheduling with the "
                        f"CPU {self.draft.method} drafter; set it false or leave it unset"
                    )
        self._check_gpus()
        problems = self.gateway.problems(tuple(names), self.baseline)
        if problems:
            raise ValueError(problems[0])
        return self

    def _check_gpus(self) -> None:
        tp = self.server.tensor_parallel_size * self.server.pipeline_parallel_size  # GPUs per server
        gpus = self.server.gpus
        if self.server.distributed_executor_backend == "ray":
            if gpus is not None:
                raise ValueError("server.gpus: with distributed_executor_backend 'ray' the Ray cluster places "
                                 "each server's GPUs across its nodes; leave server.gpus unset")
            return
        if self.server.topology == "separate":
            if gpus is not None and len(gpus) < tp * len(self.variants):
                raise ValueError(
                    f"server.gpus: topology 'separate' needs {tp * len(self.variants)} GPUs "
                    f"({len(self.variants)} servers x tensor_parallel_size {tp}), the lab lists {len(gpus)}"
                )
            return
        if gpus is not None and len(gpus) < tp:
            raise ValueError(f"server.gpus: tensor_parallel_size {tp} needs {tp} GPUs, the lab lists {len(gpus)}")
        fixed = [v.gpu_memory_utilization for v in self.variants if v.gpu_memory_utilization is not None]
        budget = self.server.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
        free = len(self.variants) - len(fixed)
        if sum(fixed) > budget + 1e-9 or (free == 0 and sum(fixed) > 1.0 + 1e-9):
            raise ValueError(
                f"server.topology: 'shared' puts {len(self.variants)} servers on one GPU, and their "
                f"gpu_memory_utilization adds up to {sum(fixed):.2f}, over the GPU's budget {budget:.2f}"
            )
        if free and (budget - sum(fixed)) / free < 0.05:
            raise ValueError(
                f"server.topology: 'shared' leaves {(budget - sum(fixed)) / free:.3f} of the GPU per server; "
                "fewer variants or a larger server.gpu_memory_utilization"
            )

    # -- queries -------------------------------------------------------------------------------

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"lab {self.name!r} has no variant {name!r} (it has {', '.join(self.variant_names)})")

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)

    @property
    def baseline(self) -> str:
        return next(v.name for v in self.variants if not v.speculative)

    def effective(self, name: str) -> Effective:
        v = self.variant(name)
        s = self.server
        index = self.variant_names.index(name)
        tp = s.tensor_parallel_size
        per = tp * s.pipeline_parallel_size  # GPUs one server uses
        gmu: float | None
        if s.topology == "shared":
            gpus = tuple((s.gpus or list(range(per)))[:per])
            gmu = v.gpu_memory_utilization if v.gpu_memory_utilization is not None else self._shared_share()
        else:
            pool = s.gpus or list(range(per * len(self.variants)))
            gpus = tuple(pool[index * per : (index + 1) * per])
            gmu = v.gpu_memory_utilization if v.gpu_memory_utilization is not None else s.gpu_memory_utilization

        def pick(key: str) -> Any:
            own = getattr(v, key)
            return own if own is not None else getattr(s, key)

        return Effective(
            variant=v.name,
            speculative=v.speculative,
            num_speculative_tokens=v.num_speculative_tokens,
            max_num_seqs=pick("max_num_seqs"),
            max_num_batched_tokens=pick("max_num_batched_tokens"),
            enable_chunked_prefill=pick("enable_chunked_prefill"),
            async_scheduling=pick("async_scheduling"),
            scheduling_policy=pick("scheduling_policy"),
            gpu_memory_utilization=gmu,
            max_model_len=pick("max_model_len"),
            stream_interval=pick("stream_interval"),
            tensor_parallel_size=tp,
            seed=s.seed,
            gpus=() if s.distributed_executor_backend == "ray" else gpus,  # the Ray cluster places them
            pipeline_parallel_size=s.pipeline_parallel_size,
            distributed_executor_backend=s.distributed_executor_backend,
            sim_gpu=s.sim_gpu,
            extra_args=(*s.extra_args, *v.extra_args),
            env={**s.env, **v.env},
            sim_faults=tuple(v.sim_faults),
            spec_options={**(self.draft.suffix_keys() if self.draft and v.speculative else {}), **v.spec_keys()},
        )

    def _shared_share(self) -> float:
        fixed = [v.gpu_memory_utilization for v in self.variants if v.gpu_memory_utilization is not None]
        free = len(self.variants) - len(fixed)
        budget = self.server.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
        return round((budget - sum(fixed)) / max(free, 1), 4)

    def with_changes(self, name: str, changes: dict[str, Any]) -> Lab:
        """A copy of the lab with one variant's settings changed (validated like a loaded file)."""
        unknown = sorted(set(changes) - RELAUNCH_KEYS)
        if unknown:
            raise ValueError(f"cannot change {', '.join(unknown)} on relaunch; allowed: {', '.join(sorted(RELAUNCH_KEYS))}")
        data = self.model_dump(mode="json")
        for v in data["variants"]:
            if v["name"] == name:
                v.update(changes)
                break
        else:
            raise KeyError(f"lab {self.name!r} has no variant {name!r}")
        try:
            return Lab.model_validate_json(json.dumps(data), strict=True)  # as strictly as a loaded file
        except ValidationError as error:  # pydantic's own text is several lines naming no range
            from .loading import describe_errors

            raise ValueError("; ".join(describe_errors(error, Lab, f"variant {name}"))) from None


def load_lab(name_or_path: str | Path) -> Lab:
    """Load a lab by path or bare name (``labs/NAME.toml``, then the bundled labs)."""
    from .loading import load_model
    from .paths import resolve

    return load_model(resolve(name_or_path, "labs"), Lab)
