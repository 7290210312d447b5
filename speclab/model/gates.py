"""The gates file (``gates.toml``): thresholds for every acceptance stage, and named profiles.

Top-level stage tables hold the defaults; ``[profiles.NAME.STAGE]`` tables override single keys,
so ``quick`` and ``release`` differ only in what they say. Rates are in percent and deltas in
percentage points, named so in every key, because a bare 0.01 is ambiguous in a release gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo

from . import limits as L
from .errors import InputError

Percent = Annotated[float, Field(ge=0.0, le=100.0)]
Points = Annotated[float, Field(ge=0.0, le=100.0)]
Ratio = Annotated[float, Field(gt=0.0, le=L.MAX_RATIO)]
Rate = Annotated[float, Field(gt=0.0, le=L.MAX_RATE)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GoldenGate(_Strict):
    """Accuracy per class may not fall below the baseline's by more than the class's allowance."""

    max_drop_points: Points = 5.0
    class_max_drop_points: dict[str, Points] = Field(
        default_factory=lambda: {"factual_qa": 0.0, "tool_call": 0.0}
    )
    min_accuracy_pct: Percent = 0.0
    class_min_accuracy_pct: dict[str, Percent] = Field(default_factory=dict)

    def drop_allowed(self, prompt_class: str) -> float:
        return self.class_max_drop_points.get(prompt_class, self.max_drop_points)

    def min_accuracy(self, prompt_class: str) -> float:
        return self.class_min_accuracy_pct.get(prompt_class, self.min_accuracy_pct)


class EquivalenceGate(_Strict):
    """Greedy: identical token ids. Distribution: a homogeneity test on the first tokens at T>0.

    ``comparison`` says how greedy outputs are compared. ``exact`` (the simulator, or vLLM in its
    batch-invariant mode, ``VLLM_BATCH_INVARIANT=1``) wants identical ids; ``tolerance`` (vLLM on real
    kernels, which are not batch-invariant) measures the baseline against itself at two batch sizes
    and accepts a divergence only where the baseline's own top two tokens nearly tie, past
    ``min_divergence_position``, with logprobs on the common prefix within the noise floor.
    ``auto`` picks by engine.
    """

    mode: Literal["greedy", "distribution", "both"] = "both"
    comparison: Literal["auto", "exact", "tolerance"] = "auto"
    min_divergence_position: int = Field(default=8, ge=0, le=L.MAX_OUTPUT_TOKENS)
    max_tie_margin: float = Field(default=0.1, gt=0.0, le=L.MAX_RATIO)  # nats between the baseline's top two at a divergence
    min_logprob_tolerance: float = Field(default=0.02, gt=0.0, le=L.MAX_RATIO)  # nats, the least the noise floor is allowed
    noise_factor: float = Field(default=2.0, ge=1.0, le=L.MAX_RATIO)  # allowed logprob drift = factor x the noise floor's
    max_extra_divergent_pct: Percent = 10.0  # divergent outputs over the noise floor's share, in points
    samples: int = Field(default=200, ge=10, le=L.MAX_SAMPLES)
    # The first token comes from prefill; speculation starts at the second, so 1 cannot see its drift.
    first_tokens: int = Field(default=4, ge=1, le=8)
    min_p_value: float = Field(default=0.01, gt=0.0, lt=1.0)
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    prompts: int = Field(default=1, ge=1, le=L.MAX_SAMPLES)
    min_expected_count: float = Field(default=5.0, gt=0.0, le=L.MAX_SAMPLES)
    test: Literal["chi2", "g"] = "chi2"

    @property
    def greedy(self) -> bool:
        return self.mode in ("greedy", "both")

    @property
    def distribution(self) -> bool:
        return self.mode in ("distribution", "both")


class StructuredGate(_Strict):
    requests_per_class: int = Field(default=20, ge=1, le=L.MAX_GATE_REQUESTS)
    max_failure_rate_pct: Percent = 1.0
    max_delta_points: Points = 0.5
    fallback: bool = True


class LatencyGate(_Strict):
    """The single-stream curve: speculation must not lose at low concurrency."""

    concurrency: list[Annotated[int, Field(ge=1, le=L.MAX_CONCURRENCY)]] = Field(
        default_factory=lambda: [1, 2, 4], min_length=1)
    requests_per_level: int = Field(default=16, ge=1, le=L.MAX_GATE_REQUESTS)
    max_p99_ratio: Ratio = 1.10
    max_p50_ratio: Optional[Ratio] = None


class StressGate(_Strict):
    """At the target concurrency: no "fast when idle, slower at peak"."""

    concurrency: int = Field(default=32, ge=1, le=L.MAX_CONCURRENCY)
    requests: int = Field(default=128, ge=1, le=L.MAX_GATE_REQUESTS)
    max_p99_ratio: Ratio = 1.5
    min_throughput_ratio: Ratio = 0.8
    max_error_rate_pct: Percent = 0.0


class CanaryGate(_Strict):
    """A small mixed slice watching the rejection rate and its per-interval spikes."""

    requests: int = Field(default=100, ge=1, le=L.MAX_GATE_REQUESTS)
    rate: Rate = 4.0
    max_rejection_rate_pct: Percent = 80.0
    max_spike_points: Points = 30.0
    min_interval_drafted: int = Field(default=20, ge=1, le=L.MAX_GATE_REQUESTS)
    max_error_rate_pct: Percent = 1.0


class AcceptanceFloors(_Strict):
    """Per-class minimum acceptance length (1 + accepted/steps), applied under stress and canary."""

    min_acceptance_length: Optional[Annotated[float, Field(ge=1.0, le=1.0 + L.MAX_SPEC_TOKENS)]] = None
    class_min_acceptance_length: dict[str, Annotated[float, Field(ge=1.0, le=1.0 + L.MAX_SPEC_TOKENS)]] = Field(
        default_factory=dict)

    def floor(self, prompt_class: str) -> float | None:
        return self.class_min_acceptance_length.get(prompt_class, self.min_acceptance_length)


SECTIONS: dict[str, type[_Strict]] = {
    "golden": GoldenGate,
    "equivalence": EquivalenceGate,
    "structured": StructuredGate,
    "latency": LatencyGate,
    "stress": StressGate,
    "canary": CanaryGate,
    "acceptance": AcceptanceFloors,
}


class StageSettings(_Strict):
    golden: GoldenGate = Field(default_factory=GoldenGate)
    equivalence: EquivalenceGate = Field(default_factory=EquivalenceGate)
    structured: StructuredGate = Field(default_factory=StructuredGate)
    latency: LatencyGate = Field(default_factory=LatencyGate)
    stress: StressGate = Field(default_factory=StressGate)
    canary: CanaryGate = Field(default_factory=CanaryGate)
    acceptance: AcceptanceFloors = Field(default_factory=AcceptanceFloors)


class GateProfile(StageSettings):
    """One resolved profile: what the accept stages read."""

    name: str
    description: str = ""


def _partial(model: type[_Strict]) -> Any:
    """The same table with every key optional, keeping each key's constraints."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        optional = FieldInfo.merge_field_infos(info, default=None, default_factory=None)
        fields[name] = (Optional[info.annotation], optional)
    return create_model(f"{model.__name__}Override", __config__=ConfigDict(extra="forbid"), **fields)


_OVERRIDES = {name: _partial(model) for name, model in SECTIONS.items()}

_PROFILE_FIELDS: dict[str, Any] = {name: (Optional[model], None) for name, model in _OVERRIDES.items()}
_PROFILE_FIELDS["description"] = (str, "")
ProfileOverride: Any = create_model("ProfileOverride", __config__=ConfigDict(extra="forbid"), **_PROFILE_FIELDS)


def _merge(settings: StageSettings, overrides: dict[str, Any]) -> dict[str, Any]:
    data = settings.model_dump(include=set(SECTIONS))
    for section, values in overrides.items():
        if section not in SECTIONS:
            raise InputError(f"gates override: unknown stage {section!r}; expected one of {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise InputError(f"gates override: {section}: expected a table of settings")
        data[section] = {**data[section], **values}
    return data


def _describe(error: ValidationError, prefix: str) -> str:
    lines = []
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"] if part != "name")
        lines.append(f"{prefix}{'.' + loc if loc else ''}: {item['msg']}")
    return "; ".join(lines)


class Gates(StageSettings):
    """The whole file: stage defaults at the top level, then named profiles of overrides."""

    version: Literal[1] = 1
    default_profile: str = "quick"
    profiles: dict[str, ProfileOverride] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _profiles_resolve(self) -> Gates:
        if self.profiles and self.default_profile not in self.profiles:
            raise ValueError(
                f"default_profile {self.default_profile!r} is not one of the profiles: {', '.join(self.profiles)}"
            )
        for name in self.profiles:
            try:
                self.profile(name)
            except InputError as error:
                raise ValueError(str(error)) from None
        return self

    def profile(self, name: str | None = None, overrides: dict[str, Any] | None = None) -> GateProfile:
        """Resolve ``name`` (default: ``default_profile``) over the top-level tables, then ``overrides``
        (``{"equivalence": {"samples": 50}}``, e.g. from the command line)."""
        chosen = name or self.default_profile
        if chosen not in self.profiles and not (name is None and not self.profiles):
            known = ", ".join(self.profiles) or "none defined"
            raise InputError(f"gates: no profile {chosen!r} (profiles: {known})")
        data = self.model_dump(include=set(SECTIONS))
        description = ""
        if chosen in self.profiles:
            override = self.profiles[chosen]
            description = override.description
            data = _merge(self, override.model_dump(exclude_none=True, exclude={"description"}))
        if overrides:
            data = _merge(StageSettings.model_validate(data), overrides)
        try:
            return GateProfile.model_validate({**data, "name": chosen, "description": description})
        except ValidationError as error:
            raise InputError(_describe(error, f"profiles.{chosen}")) from None


def load_gates(path: str | Path | None = None) -> Gates:
    """Load and validate a gates file; ``None`` or a bare name is looked up like other files."""
    from .loading import load_model
    from .paths import resolve

    return load_model(resolve(path or "gates", "gates"), Gates)
