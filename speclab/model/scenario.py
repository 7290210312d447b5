"""The scenario file (`scenarios/*.toml`): prompt classes, sampling, arrival process, run length.

A scenario says *what* traffic to fire; ``speclab.traffic.schedule`` turns it into a deterministic
plan. Prompts come inline or from a JSON-lines file next to the scenario; ``load_scenario`` reads
those files once so a loaded scenario is self-contained (and picklable for worker processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from . import limits as L
from .errors import InputError
from .gateway import DEFAULT_TENANT_HEADER, HEADER_RE, RESERVED_HEADERS, TENANT_RE
from .loading import display_path, load_jsonl, load_toml, read_input, validate

Endpoint = Literal["chat", "completions"]
Process = Literal["constant", "poisson", "gamma", "concurrency", "ramp", "steps"]
OPEN_LOOP_PROCESSES: frozenset[str] = frozenset({"constant", "poisson", "gamma", "ramp"})
DEFAULT_MAX_TOKENS = 64
PROMPT_LINE_SLACK = 64 * 1024  # a line holds a prompt plus JSON quoting, roles and a schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_size(messages: list[Message] | None, where: str = "messages") -> None:
    total = sum(len(m.content) for m in messages or [])
    if total > L.MAX_PROMPT_CHARS:
        raise ValueError(f"{where}: {total:,} characters of content; a prompt may have at most {L.MAX_PROMPT_CHARS:,}")


class Message(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=L.MAX_PROMPT_CHARS)


class PromptItem(_Strict):
    """One prompt as sent: a plain prompt or a message list, with per-prompt overrides."""

    prompt: str | None = Field(default=None, max_length=L.MAX_PROMPT_CHARS)
    messages: list[Message] | None = Field(default=None, min_length=1)
    prompt_class: str | None = Field(default=None, alias="class")
    max_tokens: int | None = Field(default=None, gt=0, le=L.MAX_OUTPUT_TOKENS)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    id: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> PromptItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError('give exactly one of "prompt" or "messages"')
        _check_size(self.messages)
        return self

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [m.model_dump() for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def as_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(m.content for m in self.messages or [])


class Step(_Strict):
    """One rung of a ladder: an open-loop rate or a closed-loop concurrency, held for duration_s."""

    rate: float | None = Field(default=None, gt=0, le=L.MAX_RATE)
    concurrency: int | None = Field(default=None, gt=0, le=L.MAX_CONCURRENCY)
    duration_s: float = Field(gt=0, le=L.MAX_DURATION_S)

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of rate or concurrency")
        return self


class Arrival(_Strict):
    """When requests are sent. Fields not used by the chosen process are errors, to catch typos."""

    process: Process
    rate: float | None = Field(default=None, gt=0, le=L.MAX_RATE)
    burstiness: float | None = Field(default=None, gt=0, le=L.MAX_BURSTINESS)
    concurrency: int | None = Field(default=None, gt=0, le=L.MAX_CONCURRENCY)
    start_rate: float | None = Field(default=None, gt=0, le=L.MAX_RATE)
    end_rate: float | None = Field(default=None, gt=0, le=L.MAX_RATE)
    steps: list[Step] | None = None

    @model_validator(mode="after")
    def _fields_for_process(self) -> Arrival:
        needs: dict[str, tuple[str, ...]] = {
            "constant": ("rate",),
            "poisson": ("rate",),
            "gamma": ("rate", "burstiness"),
            "concurrency": ("concurrency",),
            "ramp": ("start_rate", "end_rate"),
            "steps": ("steps",),
        }
        required = needs[self.process]
        for name in required:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required for process {self.process!r}")
        for name in ("rate", "burstiness", "concurrency", "start_rate", "end_rate", "steps"):
            if name not in required and getattr(self, name) is not None:
                raise ValueError(f"{name}: not used by process {self.process!r} (it takes {', '.join(required)})")
        if self.steps is not None:
            if not self.steps:
                raise ValueError("steps: expected at least one step")
            kinds = {"rate" if s.rate is not None else "concurrency" for s in self.steps}
            if len(kinds) > 1:
                raise ValueError("steps: mix of rate and concurrency steps; a ladder is one or the other")
        return self

    @property
    def open_loop(self) -> bool:
        if self.process == "steps":
            return bool(self.steps) and self.steps[0].rate is not None  # type: ignore[index]
        return self.process in OPEN_LOOP_PROCESSES

    @property
    def steps_duration_s(self) -> float | None:
        return sum(s.duration_s for s in self.steps) if self.steps else None


class PromptClass(_Strict):
    """A named class of prompts with its sampling; the unit every number is reported by."""

    weight: float = Field(default=1.0, gt=0, le=L.MAX_WEIGHT)
    prompts: list[Annotated[str, Field(max_length=L.MAX_PROMPT_CHARS)] | list[Message]] | None = Field(
        default=None, min_length=1)
    prompts_file: str | None = None
    endpoint: Endpoint | None = None
    temperature: float | None = Field(default=None, ge=0, le=L.MAX_TEMPERATURE)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, le=L.MAX_TOP_K)
    seed: int | None = Field(default=None, ge=L.SEED_MIN, le=L.SEED_MAX)
    max_tokens: int | None = Field(default=None, gt=0, le=L.MAX_OUTPUT_TOKENS)  # set: every prompt; unset: per line, else 64
    stop: list[str] | str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    schema_file: str | None = None
    tenant: str | None = None  # sent in the scenario's tenant_header; a gateway routes by it
    headers: dict[str, str] = Field(default_factory=dict)  # extra request headers (never secrets)

    _items: list[PromptItem] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _prompt_source(self) -> PromptClass:
        if self.prompts is None and self.prompts_file is None:
            raise ValueError("prompts: give prompts (a list) or prompts_file (JSON lines)")
        if self.prompts is not None and self.prompts_file is not None:
            raise ValueError("prompts_file: give prompts or prompts_file, not both")
        if self.schema_ is not None and self.schema_file is not None:
            raise ValueError("schema_file: give schema or schema_file, not both")
        if self.tenant is not None and not TENANT_RE.match(self.tenant):
            raise ValueError(f"tenant: 1-63 letters, digits, '.', '_' or '-', got {self.tenant!r}")
        for name in self.headers:
            if not HEADER_RE.match(name):
                raise ValueError(f"headers.{name}: not an HTTP header name")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"headers.{name}: set by speclab itself (an API key goes in --api-key-env)")
        for i, prompt in enumerate(self.prompts or []):
            if isinstance(prompt, list):
                _check_size(prompt, f"prompts[{i}]")
        return self

    @property
    def stochastic(self) -> bool:
        """vLLM's default temperature is 1.0, so an unset temperature samples."""
        return self.temperature is None or self.temperature > 0

    def items(self) -> list[PromptItem]:
        """The class's prompts; from prompts_file only once ``load_scenario`` has read it."""
        if self._items is not None:
            return self._items
        if self.prompts is None:
            raise InputError(f"prompts_file {self.prompts_file!r} has not been loaded (use load_scenario)")
        self._items = [
            PromptItem(prompt=p) if isinstance(p, str) else PromptItem(messages=p) for p in self.prompts
        ]
        return self._items


class Scenario(_Strict):
    name: str | None = None
    description: str = ""
    seed: int = Field(default=0, ge=L.SEED_MIN, le=L.SEED_MAX)
    duration_s: float | None = Field(default=None, gt=0, le=L.MAX_DURATION_S)
    requests: int | None = Field(default=None, gt=0, le=L.MAX_REQUESTS)
    warmup_s: float = Field(default=0.0, ge=0, le=L.MAX_DURATION_S)
    warmup_requests: int = Field(default=0, ge=0, le=L.MAX_REQUESTS)
    endpoint: Endpoint = "chat"
    tenant_header: str = Field(default=DEFAULT_TENANT_HEADER, pattern=HEADER_RE.pattern)
    stall_timeout_s: float = Field(default=30.0, gt=0, le=L.MAX_STALL_TIMEOUT_S)
    request_timeout_s: float = Field(default=600.0, gt=0, le=L.MAX_REQUEST_TIMEOUT_S)
    arrival: Arrival
    classes: dict[str, PromptClass] = Field(min_length=1)
    lab: dict[str, Any] | None = None  # an inline lab section, validated by the lab loader

    @model_validator(mode="after")
    def _length(self) -> Scenario:
        if self.duration_s is None and self.requests is None and self.arrival.process != "steps":
            raise ValueError("duration_s: give duration_s or requests (or both)")
        if self.arrival.process == "ramp" and self.duration_s is None:
            raise ValueError("duration_s: a ramp runs over duration_s; set it")
        total = self.total_duration_s
        if total is not None and self.warmup_s >= total:
            raise ValueError(f"warmup_s: must be shorter than the run ({total:g} s)")
        if self.requests is not None and self.warmup_requests >= self.requests:
            raise ValueError(f"warmup_requests: must be fewer than requests ({self.requests})")
        for name in self.classes:
            if not name or any(c in name for c in " ,.=") :
                raise ValueError(f"classes.{name}: class names may not contain spaces, commas, dots or '='")
        for name, spec in self.classes.items():
            if spec.tenant is not None and any(h.lower() == self.tenant_header.lower() for h in spec.headers):
                raise ValueError(f"classes.{name}.headers: {self.tenant_header} comes from tenant; set one, not both")
        return self

    @property
    def total_duration_s(self) -> float | None:
        """The run's length in active seconds: duration_s, capped by a ladder's total."""
        ladder = self.arrival.steps_duration_s
        if self.duration_s is None:
            return ladder
        return self.duration_s if ladder is None else min(ladder, self.duration_s)

    def endpoint_of(self, class_name: str) -> Endpoint:
        return self.classes[class_name].endpoint or self.endpoint


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario by path or bare name and read its prompts and schema files."""
    from .paths import resolve

    path = resolve(name_or_path, "scenarios")
    data = load_toml(path)
    scenario = validate(data, Scenario, source=display_path(path))
    if scenario.name is None:
        scenario.name = path.stem
    base = path.parent
    problems: list[str] = []
    for class_name, spec in scenario.classes.items():
        where = f"{display_path(path)}: classes.{class_name}"
        if spec.schema_file is not None:
            try:
                spec.schema_ = _read_json_object(base / spec.schema_file)
                spec.schema_file = None
            except InputError as error:
                problems.append(f"{where}.schema_file: {error}")
        if spec.prompts_file is not None:
            try:
                items = load_jsonl(base / spec.prompts_file, PromptItem, max_bytes=L.MAX_PROMPTS_FILE_BYTES,
                                   max_line_chars=L.MAX_PROMPT_CHARS + PROMPT_LINE_SLACK)
            except InputError as error:
                problems.append(f"{where}.prompts_file: {error}")
                continue
            mine = [it for it in items if it.prompt_class in (None, class_name)]
            if not mine:
                problems.append(f"{where}.prompts_file: no prompts for class {class_name!r} in {spec.prompts_file}")
            spec._items = mine
    if problems:
        raise InputError("\n".join(problems))
    return scenario


def _read_json_object(path: Path) -> dict[str, Any]:
    import json

    shown = display_path(path)
    text = read_input(path, limit=L.MAX_CONFIG_FILE_BYTES, what="a schema file")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InputError(f"{shown}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{shown}: expected a JSON object (a schema)")
    return data
