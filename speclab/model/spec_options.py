"""A lab variant's vLLM 0.33 speculative knobs beyond k, and the draft's suffix-decoding settings.

Each key is emitted into the variant's ``--speculative-config`` as is. A lab is refused for what
vLLM 0.33 refuses (in its words, ``speclab.model.speculative``) and also for what it would accept
and then quietly not do: a schedule entry above ``num_speculative_tokens`` (clamped), a schedule or
block verification under suffix decoding (Model Runner V1 drops both), FLy settings without FLy.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from . import limits as L
from . import speculative as sd
from .speculative import DraftSampleMethod, RejectionSampleMethod

SPEC_OPTION_KEYS: tuple[str, ...] = (
    "num_speculative_tokens_per_batch_size", "draft_sample_method", "rejection_sample_method",
    "synthetic_acceptance_rates", "synthetic_acceptance_length", "fly_window_size", "fly_entropy_threshold",
    "fly_entropy_top_k",
)
_FLY_KEYS = ("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")
_BatchSize = Annotated[int, Field(ge=1, le=L.MAX_NUM_SEQS)]
_ScheduledK = Annotated[int, Field(ge=0, le=L.MAX_SPEC_TOKENS)]
_Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class SpecOptions(BaseModel):
    """None everywhere means vLLM's defaults (greedy drafts, standard verification, one k)."""

    num_speculative_tokens_per_batch_size: list[tuple[_BatchSize, _BatchSize, _ScheduledK]] | None = None
    draft_sample_method: DraftSampleMethod | None = None
    rejection_sample_method: RejectionSampleMethod | None = None
    synthetic_acceptance_rates: list[_Rate] | None = None
    synthetic_acceptance_length: float | None = Field(default=None, ge=1.0, le=L.MAX_SPEC_TOKENS + 1)
    fly_window_size: int | None = Field(default=None, ge=1, le=L.MAX_SPEC_TOKENS)
    fly_entropy_threshold: float | None = Field(default=None, ge=0.0, le=L.MAX_RATIO)  # nats
    fly_entropy_top_k: int | None = Field(default=None, ge=1, le=L.MAX_TOP_K)

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _sorted_schedule(cls, value: list[tuple[int, int, int]] | None) -> list[tuple[int, int, int]] | None:
        return None if value is None else sd.normalize_schedule(value)

    def spec_keys(self) -> dict[str, Any]:
        """The set keys, JSON-ready, for ``--speculative-config``."""
        out: dict[str, Any] = {}
        for key in SPEC_OPTION_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = [list(entry) for entry in value] if key == "num_speculative_tokens_per_batch_size" else value
        return out

    @property
    def lossy_note(self) -> str | None:
        return sd.lossy_note(self.rejection_sample_method)

    def check_spec_options(self, name: str, speculative: bool, k: int | None) -> None:
        """ValueError naming the field when vLLM 0.33 would refuse these settings or not honour them."""
        keys = self.spec_keys()
        if not speculative:
            if keys:
                raise ValueError(f"{next(iter(keys))}: variant {name!r} is the baseline (speculative = false); remove it")
            return
        if k is None:
            return
        schedule = self.num_speculative_tokens_per_batch_size
        if schedule is not None:
            over = sd.schedule_over_k(schedule, k)
            if over:
                raise ValueError(f"num_speculative_tokens_per_batch_size: {list(over[0])} asks for k={over[0][2]}, over "
                                 f"num_speculative_tokens ({k}); vLLM 0.33 would quietly clamp it to {k}")
        method = self.rejection_sample_method or "standard"
        try:
            sd.check_rejection_settings(method, k, rates=self.synthetic_acceptance_rates,
                                        length=self.synthetic_acceptance_length, fly_window_size=self.fly_window_size)
        except ValueError as exc:
            field = "rejection_sample_method" if method in ("synthetic", "fly") else "synthetic_acceptance_length"
            raise ValueError(f"{field}: {exc}") from None
        if method != "fly":
            for key in _FLY_KEYS:
                if getattr(self, key) is not None:
                    raise ValueError(f"{key}: only rejection_sample_method 'fly' uses it")

    def check_with_draft(self, name: str, method: str, heterogeneous_vocab: bool) -> None:
        """The rules that depend on the lab's draft method."""
        if heterogeneous_vocab and self.draft_sample_method == "probabilistic":
            raise ValueError(f"draft_sample_method: variant {name!r}: use_heterogeneous_vocab currently only supports "
                             "greedy draft sampling. Set draft_sample_method='greedy' (the default) or omit it.")
        if method not in sd.DYNAMIC_K_METHODS and self.num_speculative_tokens_per_batch_size is not None:
            raise ValueError(f"num_speculative_tokens_per_batch_size: variant {name!r}: vLLM 0.33 disables it with "
                             f"method {method!r} (Model Runner V1 cannot truncate its drafts) and runs the static k")
        if method == "suffix" and self.rejection_sample_method == "block":
            raise ValueError(f"rejection_sample_method: variant {name!r}: 'block' runs on Model Runner V2 only; with "
                             "method 'suffix' vLLM 0.33 verifies token by token ('standard')")


class SuffixOptions(BaseModel):
    """Suffix decoding's settings (``suffix_decoding_*``); None: vLLM's defaults."""

    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1, le=L.MAX_OUTPUT_TOKENS)
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0, le=L.MAX_REQUESTS)
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0.0, le=L.MAX_RATIO)
    suffix_decoding_min_token_prob: float | None = Field(default=None, ge=0.0, le=1.0)

    def suffix_keys(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in sd.SUFFIX_DEFAULTS if getattr(self, key) is not None}

    def check_suffix_options(self, method: str) -> None:
        keys = self.suffix_keys()
        if keys and method != "suffix":
            raise ValueError(f"{next(iter(keys))}: only method 'suffix' uses it")
        if not keys:
            return
        merged = {**sd.SUFFIX_DEFAULTS, **keys}
        try:
            sd.check_suffix_settings(int(merged["suffix_decoding_max_tree_depth"]),
                                     int(merged["suffix_decoding_max_cached_requests"]),
                                     float(merged["suffix_decoding_max_spec_factor"]),
                                     float(merged["suffix_decoding_min_token_prob"]))
        except ValueError as exc:
            raise ValueError(f"{str(exc).split('=')[0]}: {exc}") from None
