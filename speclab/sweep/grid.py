"""The sweep's grid: configurations (k, per-batch schedules, batch limits, chunked prefill) times
a load ladder, with repeats, warm-up, a minimum of requests per class and the SLOs.

Validated once, up front, so a bad grid is one line naming the field (exit 2) before any server
starts. k = 0 (the baseline) is always part of it: every comparison is against it, at the same
batch settings and on the same traffic. Errors name the ``speclab sweep`` option that gave the
value (``--k``, ``--schedule``, ``--concurrency``, ``--repeats`` ...), the grid's only source.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any, Literal

from speclab.model.errors import InputError
from speclab.model.lab import Lab
from speclab.model.speculative import SUFFIX_DEFAULT_TREE_DEPTH

from .rules import DraftRules, Entry, check_k, check_schedule
from .slo import Slo, parse_slo

LoadMode = Literal["concurrency", "rate"]
MAX_CONCURRENCY = 10_000
MAX_RATE = 10_000.0
MAX_NUM_SEQS = 65_536
MAX_BATCHED_TOKENS = 16_777_216
MAX_REPEATS = 100
PHASES = ("grid", "confirm")


@dataclass(frozen=True, slots=True)
class CellConfig:
    """One server configuration; ``None`` settings are the lab's own. ``k`` = 0 is the baseline;
    a schedule arm's ``k`` is its ``num_speculative_tokens``, the largest k it schedules."""

    k: int
    schedule: tuple[Entry, ...] | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None

    @property
    def speculative(self) -> bool:
        return self.k > 0

    @property
    def fixed(self) -> bool:
        return self.schedule is None

    def baseline(self) -> CellConfig:
        """The k = 0 arm with the same batch settings: what this arm is compared against."""
        return replace(self, k=0, schedule=None)

    def group(self) -> tuple[int | None, int | None, bool | None]:
        return (self.max_num_seqs, self.max_num_batched_tokens, self.enable_chunked_prefill)

    def arm(self, varying: Iterable[str] = ()) -> str:
        """``k4``, ``sched[1-16:4,17-64:2]``; batch settings appended where ``varying`` names them."""
        text = f"k{self.k}" if self.schedule is None else "sched[" + ",".join(
            f"{a}-{b}:{k}" for a, b, k in self.schedule) + "]"
        extra = {"max_num_seqs": ("seqs", self.max_num_seqs), "max_num_batched_tokens": ("batched", self.max_num_batched_tokens),
                 "enable_chunked_prefill": ("chunked", self.enable_chunked_prefill)}
        for name in varying:
            short, value = extra[name]
            shown = "lab" if value is None else ("on" if value is True else "off" if value is False else value)
            text += f" {short}={shown}"
        return text

    @property
    def key(self) -> str:
        """A file-name-safe id: ``k4``, ``sched1-16x4_17-64x2``, ``k4-seqs128-batched8192-chunkedoff``."""
        text = f"k{self.k}" if self.schedule is None else "sched" + "_".join(f"{a}-{b}x{k}" for a, b, k in self.schedule)
        if self.max_num_seqs is not None:
            text += f"-seqs{self.max_num_seqs}"
        if self.max_num_batched_tokens is not None:
            text += f"-batched{self.max_num_batched_tokens}"
        if self.enable_chunked_prefill is not None:
            text += "-chunked" + ("on" if self.enable_chunked_prefill else "off")
        return text

    def settings(self) -> dict[str, Any]:
        """The lab settings a relaunch applies for this cell (``num_speculative_tokens`` 0 = no speculation)."""
        out: dict[str, Any] = {"num_speculative_tokens": self.k}
        if self.schedule is not None:
            out["num_speculative_tokens_per_batch_size"] = [list(e) for e in self.schedule]
        for name in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"k": self.k, "schedule": None if self.schedule is None else [list(e) for e in self.schedule],
                "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
                "enable_chunked_prefill": self.enable_chunked_prefill}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellConfig:
        schedule = data.get("schedule")
        return cls(int(data["k"]), None if schedule is None else tuple((int(a), int(b), int(k)) for a, b, k in schedule),
                   data.get("max_num_seqs"), data.get("max_num_batched_tokens"), data.get("enable_chunked_prefill"))


@dataclass(frozen=True, slots=True, order=True)
class LoadLevel:
    """One rung of the ladder: ``concurrency`` requests in flight (closed loop) or ``rate`` req/s (open loop)."""

    mode: LoadMode
    value: float

    @property
    def key(self) -> str:
        return f"c{int(self.value)}" if self.mode == "concurrency" else f"r{self.value:g}"

    @property
    def label(self) -> str:
        return f"{int(self.value)}" if self.mode == "concurrency" else f"{self.value:g} req/s"

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "value": int(self.value) if self.mode == "concurrency" else self.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadLevel:
        return cls(data["mode"], float(data["value"]))


@dataclass(frozen=True, slots=True)
class CellPlan:
    """One cell to run: a configuration at a load level, in one repeat of one phase."""

    config: CellConfig
    load: LoadLevel
    repeat: int = 1
    phase: str = "grid"

    @property
    def id(self) -> str:
        prefix = "" if self.phase == "grid" else f"{self.phase}-"
        return f"{prefix}{self.config.key}_{self.load.key}_r{self.repeat}"


@dataclass(frozen=True, slots=True)
class Grid:
    configs: tuple[CellConfig, ...]
    load: tuple[LoadLevel, ...]
    repeats: int = 1
    warmup_s: float = 0.0
    min_requests: int = 1
    slo: Slo = field(default_factory=Slo)
    tie_tolerance: float = 0.01
    rules: DraftRules = field(default_factory=lambda: DraftRules(None))

    @property
    def mode(self) -> LoadMode:
        return self.load[0].mode

    def varying(self) -> tuple[str, ...]:
        return varying_settings(self.configs)

    def cells(self, phase: str = "grid", configs: Sequence[CellConfig] | None = None) -> list[CellPlan]:
        """Every cell in run order: repeat by repeat, each a full ladder, baselines first at each level."""
        chosen = tuple(configs) if configs is not None else self.configs
        ordered = order_configs(chosen)
        return [CellPlan(c, level, r, phase) for r in range(1, self.repeats + 1) for level in self.load for c in ordered]

    def notes(self, lab_max_num_seqs: int | None) -> list[str]:
        """What the user should know before running (a ladder the running batch cannot follow)."""
        out: list[str] = []
        if self.mode != "concurrency":
            return out
        top = max(level.value for level in self.load)
        for seqs in sorted({c.max_num_seqs or lab_max_num_seqs for c in self.configs} - {None}):  # type: ignore[type-var]
            if seqs is not None and top > seqs:
                out.append(f"concurrency {int(top)} is above max_num_seqs {seqs}: the running batch stops at "
                           f"{seqs} and the rest queues, so levels above it measure queueing, not larger batches")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"configs": [c.as_dict() for c in self.configs], "load": [level.as_dict() for level in self.load],
                "repeats": self.repeats, "warmup_s": self.warmup_s, "min_requests": self.min_requests,
                "slo": self.slo.as_dict(), "tie_tolerance": self.tie_tolerance,
                "draft": {"method": self.rules.method, "rejection_sample_method": self.rules.rejection_sample_method,
                          "n_predict": self.rules.n_predict, "suffix_max_tree_depth": self.rules.suffix_max_tree_depth,
                          "fly_window_size": self.rules.fly_window_size}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grid:
        return cls(tuple(CellConfig.from_dict(c) for c in data["configs"]),
                   tuple(LoadLevel.from_dict(x) for x in data["load"]), int(data["repeats"]), float(data["warmup_s"]),
                   int(data["min_requests"]), Slo.from_dict(data.get("slo") or {}), float(data["tie_tolerance"]),
                   DraftRules(**data["draft"]))


def order_configs(configs: Iterable[CellConfig]) -> list[CellConfig]:
    """Batch-settings groups in first-seen order; in each, the baseline, fixed k ascending, then schedules."""
    seen: dict[CellConfig, None] = dict.fromkeys(configs)
    groups: dict[tuple[int | None, int | None, bool | None], int] = {}
    for c in seen:
        groups.setdefault(c.group(), len(groups))
    return sorted(seen, key=lambda c: (groups[c.group()], c.schedule is not None, c.k, c.schedule or ()))


def varying_settings(configs: Iterable[CellConfig]) -> tuple[str, ...]:
    """The batch settings that take more than one value across ``configs``, in label order."""
    groups = {c.group() for c in configs}
    names = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
    return tuple(name for i, name in enumerate(names) if len({g[i] for g in groups}) > 1)


def rules_for_lab(lab: Lab) -> DraftRules:
    """The drafter facts a lab states: the draft's method and suffix depth, and the verification of
    its first speculative variant, which every speculative cell copies (``session/sweep_lab.py``)."""
    draft = lab.draft
    if draft is None:
        return DraftRules(None)
    source = next((v for v in lab.variants if v.speculative), None)
    return DraftRules(
        draft.method,
        rejection_sample_method=(source.rejection_sample_method if source else None) or "standard",
        n_predict=getattr(draft, "n_predict", None),  # not in the lab file yet: MTP checkpoints' own count
        suffix_max_tree_depth=draft.suffix_decoding_max_tree_depth or SUFFIX_DEFAULT_TREE_DEPTH,
        fly_window_size=source.fly_window_size if source else None,
    )


def _whole(value: object, field_name: str, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputError(f"{field_name}: {value!r} is not a whole number")
    if not lo <= value <= hi:
        raise InputError(f"{field_name}: {value} is out of range ({what} {lo}–{hi:,})")
    return value


def _distinct(values: Sequence[Any], field_name: str) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise InputError(f"{field_name}: {seen[0]!r} is given twice")


def _ladder(concurrency: Sequence[Any] | None, rate: Sequence[Any] | None) -> tuple[LoadLevel, ...]:
    if concurrency and rate:
        raise InputError("--concurrency, --rate: give one load ladder, not both (a ladder is closed loop or open loop)")
    if not concurrency and not rate:
        raise InputError("--concurrency: the load ladder is empty; give concurrency levels (e.g. 1,8,32) or --rate")
    levels: list[LoadLevel] = []
    if concurrency:
        _distinct(list(concurrency), "--concurrency")
        for c in concurrency:
            if isinstance(c, (int, float)) and not isinstance(c, bool) and c <= 0:
                raise InputError(f"--concurrency: {c} is not a load level; concurrency must be at least 1")
            levels.append(LoadLevel("concurrency", _whole(c, "--concurrency", 1, MAX_CONCURRENCY, "requests in flight")))
    else:
        assert rate is not None
        _distinct(list(rate), "--rate")
        for r in rate:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                raise InputError(f"--rate: {r!r} is not a rate in requests/s")
            if r <= 0:
                raise InputError(f"--rate: {r:g} is not a load level; a rate must be above 0 requests/s")
            if r > MAX_RATE:
                raise InputError(f"--rate: {r:g} requests/s is above the limit of {MAX_RATE:,.0f}")
            levels.append(LoadLevel("rate", float(r)))
    return tuple(sorted(levels))


def _axis(values: Sequence[Any] | None, field_name: str, check: Any) -> tuple[Any, ...]:
    if values is None or len(values) == 0:
        return (None,)
    _distinct(list(values), field_name)
    return tuple(None if v is None else check(v, field_name) for v in values)


def _bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{field_name}: {value!r} is not on/off")
    return value


def make_grid(
    k: Sequence[int],
    *,
    rules: DraftRules,
    schedules: Sequence[object] = (),
    max_num_seqs: Sequence[int | None] | None = None,
    max_num_batched_tokens: Sequence[int | None] | None = None,
    chunked_prefill: Sequence[bool | None] | None = None,
    concurrency: Sequence[int] | None = None,
    rate: Sequence[float] | None = None,
    repeats: int = 1,
    warmup_s: float = 0.0,
    min_requests: int = 1,
    slo: Slo | str | None = None,
    tie_tolerance: float = 0.01,
) -> Grid:
    """The validated grid; k = 0 is added when missing. InputError names the first bad field."""
    ks = list(k)
    if not ks and not schedules:
        raise InputError("--k: the grid is empty; give draft lengths to compare with the baseline (e.g. 0,2,4)")
    _distinct(ks, "--k")
    for value in ks:
        check_k(value, rules, "--k")
    entries = [tuple(check_schedule(s, rules, schedule_option(i, len(schedules)))) for i, s in enumerate(schedules)]
    _distinct(entries, "--schedule")
    if not [x for x in ks if x > 0] and not entries:
        raise InputError("--k: the grid has only k=0; add a draft length (or a schedule) to compare with the baseline")
    seqs = _axis(max_num_seqs, "--max-num-seqs", lambda v, f: _whole(v, f, 1, MAX_NUM_SEQS, "sequences"))
    batched = _axis(max_num_batched_tokens, "--max-num-batched-tokens",
                    lambda v, f: _whole(v, f, 1, MAX_BATCHED_TOKENS, "tokens"))
    chunked = _axis(chunked_prefill, "--chunked-prefill", _bool)
    load = _ladder(concurrency, rate)
    repeats = _whole(repeats, "--repeats", 1, MAX_REPEATS, "repeats")
    min_requests = _whole(min_requests, "--min-requests", 1, 10_000_000, "requests per class")
    if isinstance(warmup_s, bool) or not isinstance(warmup_s, (int, float)) or not math.isfinite(warmup_s) or warmup_s < 0:
        raise InputError(f"--warmup: {warmup_s!r} must be a duration of 0 s or more")
    if isinstance(tie_tolerance, bool) or not isinstance(tie_tolerance, (int, float)) or not 0 <= tie_tolerance < 1:
        raise InputError(f"--tie-tolerance: {tie_tolerance!r} must be a fraction in [0, 1)")
    parsed_slo = slo if isinstance(slo, Slo) else parse_slo(slo, "--slo")
    arms: list[tuple[int, tuple[Entry, ...] | None]] = [(0, None)]
    arms += [(x, None) for x in sorted(set(ks) - {0})]
    arms += [(max(e[2] for e in s), s) for s in entries]
    configs = tuple(CellConfig(kk, sched, a, b, c) for (a, b, c), (kk, sched) in product(product(seqs, batched, chunked), arms))
    return Grid(configs, load, repeats, float(warmup_s), min_requests, parsed_slo, float(tie_tolerance), rules)


def parse_list(text: str | None, field_name: str, kind: type = int) -> list[Any]:
    """``0,2,4`` -> [0, 2, 4]; ``on,off`` -> [True, False] with ``kind=bool``; a bad item names the field."""
    if text is None or not text.strip():
        return []
    out: list[Any] = []
    for raw in (p.strip() for p in text.split(",")):
        if kind is bool:
            if raw.lower() not in ("on", "off", "true", "false"):
                raise InputError(f"{field_name}: {raw!r} is not on/off")
            out.append(raw.lower() in ("on", "true"))
            continue
        try:
            number = float(raw)
        except ValueError:
            raise InputError(f"{field_name}: {raw!r} is not a number") from None
        if kind is int and not number.is_integer():
            raise InputError(f"{field_name}: {raw!r} is not a whole number")
        out.append(int(number) if kind is int else number)
    return out


def schedule_option(index: int, count: int) -> str:
    """The name of the ``index``-th of ``count`` ``--schedule`` options, for its errors."""
    return "--schedule" if count == 1 else f"--schedule #{index + 1}"


def parse_schedule(text: str, field_name: str) -> list[list[int]]:
    """``1-16:4,17-64:2,65-256:0`` -> [[1, 16, 4], [17, 64, 2], [65, 256, 0]] (checked by the grid)."""
    out: list[list[int]] = []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        span, sep, k = part.partition(":")
        lo, dash, hi = span.partition("-")
        try:
            out.append([int(lo), int(hi if dash else lo), int(k)])
        except ValueError:
            raise InputError(f"{field_name}[{i}]: {part!r} is not START-END:K (e.g. 1-16:4)") from None
        if not sep:
            raise InputError(f"{field_name}[{i}]: {part!r} is not START-END:K (e.g. 1-16:4)")
    return out
