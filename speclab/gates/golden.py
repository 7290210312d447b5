"""The golden set: cases with checks, accuracy per class per variant, and the accuracy-drop gate.

Checks judge only the response text (and, for ``baseline_equal``, the baseline's text), so the
same set works against the simulator and against real instruction models. A file line is::

    {"id": "fq-1", "class": "factual_qa", "messages": [{"role": "user", "content": "..."}],
     "check": {"kind": "contains", "value": "Paris", "ignore_case": true}}

Check fields by kind: ``exact`` {value, strip=true, ignore_case=false};
``contains`` {value: str | [str], ignore_case=true, match="all"|"any"};
``regex`` {pattern, ignore_case=false, full_match=false}; ``json_schema`` {schema};
``refusal`` {expect_refusal=true}; ``baseline_equal`` {strip=true}.
``expected`` is accepted for ``value`` and ``case_insensitive`` for ``ignore_case``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import jsonschema
from pydantic import AliasChoices, BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from speclab.model.errors import InputError
from speclab.model.gates import GoldenGate
from speclab.model.loading import load_jsonl
from speclab.model.records import RequestRecord

from .result import StageResult
from .stages import GOLDEN

REFUSAL_PHRASES: tuple[str, ...] = (
    "i can't help", "i cannot help", "i can't assist", "i cannot assist", "i won't help",
    "i will not help", "i can't provide", "i cannot provide", "i won't provide", "i'm unable to",
    "i am unable to", "i'm not able to", "i am not able to", "i must decline", "i can't do that",
    "i cannot do that", "i can't comply", "i cannot comply", "i won't be able to", "i'm sorry, but i",
    "i am sorry, but i", "sorry, i can't", "sorry, i cannot", "i can not help", "i'm not going to help",
)

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?```$", re.S)


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ExactCheck(_Check):
    kind: Literal["exact"]
    value: str = Field(validation_alias=AliasChoices("value", "expected"))
    strip: bool = True
    ignore_case: bool = Field(default=False, validation_alias=AliasChoices("ignore_case", "case_insensitive"))


class ContainsCheck(_Check):
    kind: Literal["contains"]
    value: Union[str, list[str]] = Field(validation_alias=AliasChoices("value", "expected"))
    ignore_case: bool = Field(default=True, validation_alias=AliasChoices("ignore_case", "case_insensitive"))
    match: Literal["all", "any"] = "all"

    @property
    def needles(self) -> list[str]:
        return [self.value] if isinstance(self.value, str) else list(self.value)


class RegexCheck(_Check):
    kind: Literal["regex"]
    pattern: str
    ignore_case: bool = Field(default=False, validation_alias=AliasChoices("ignore_case", "case_insensitive"))
    full_match: bool = False

    @model_validator(mode="after")
    def _compiles(self) -> RegexCheck:
        try:
            re.compile(self.pattern)
        except re.error as error:
            raise ValueError(f"pattern: not a valid regular expression ({error})") from None
        return self


class JsonSchemaCheck(_Check):
    kind: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")

    @model_validator(mode="after")
    def _valid_schema(self) -> JsonSchemaCheck:
        try:
            jsonschema.validators.validator_for(self.json_schema).check_schema(self.json_schema)
        except jsonschema.SchemaError as error:
            raise ValueError(f"schema: not a valid JSON schema ({error.message})") from None
        return self


class RefusalCheck(_Check):
    kind: Literal["refusal"]
    expect_refusal: bool = True


class BaselineEqualCheck(_Check):
    kind: Literal["baseline_equal"]
    strip: bool = True


_CHECKS: dict[str, type[_Check]] = {
    "exact": ExactCheck, "contains": ContainsCheck, "regex": RegexCheck,
    "json_schema": JsonSchemaCheck, "refusal": RefusalCheck, "baseline_equal": BaselineEqualCheck,
}


def _kind_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return f"<{kind}>" if isinstance(kind, str) else None


# Tags in angle brackets keep error paths readable: the loader drops non-identifier parts.
Check = Annotated[
    Union[
        Annotated[ExactCheck, Tag("<exact>")],
        Annotated[ContainsCheck, Tag("<contains>")],
        Annotated[RegexCheck, Tag("<regex>")],
        Annotated[JsonSchemaCheck, Tag("<json_schema>")],
        Annotated[RefusalCheck, Tag("<refusal>")],
        Annotated[BaselineEqualCheck, Tag("<baseline_equal>")],
    ],
    Discriminator(_kind_tag),
]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class GoldenCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(min_length=1)
    prompt_class: str = Field(alias="class", min_length=1)
    messages: list[Message] | None = None
    prompt: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    check: Check
    note: str = ""

    @model_validator(mode="before")
    @classmethod
    def _known_kind(cls, data: Any) -> Any:
        check = data.get("check") if isinstance(data, dict) else None
        if isinstance(check, dict) and check.get("kind") not in _CHECKS:
            kinds = ", ".join(repr(k) for k in _CHECKS)
            raise ValueError(f"check.kind: expected one of {kinds}, got {check.get('kind')!r}")
        return data

    @model_validator(mode="after")
    def _one_input(self) -> GoldenCase:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("messages: give exactly one of 'messages' or 'prompt'")
        return self


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    reason: str = ""


def load_golden(paths: str | Path | Iterable[str | Path]) -> list[GoldenCase]:
    """Cases from JSONL files or directories of them (sorted); ids must be unique across files."""
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files: list[Path] = []
    for item in given:
        path = Path(item)
        files.extend(sorted(path.glob("*.jsonl")) if path.is_dir() else [path])
    if not files:
        raise InputError(f"{', '.join(str(p) for p in given)}: no golden-set files (*.jsonl)")
    cases: list[GoldenCase] = []
    seen: dict[str, Path] = {}
    for file in files:
        for case in load_jsonl(file, GoldenCase):
            if case.id in seen:
                raise InputError(f"{file}: id {case.id!r} is already used in {seen[case.id]}")
            seen[case.id] = file
            cases.append(case)
    return cases


def parse_json_output(text: str) -> Any:
    """JSON from a response, tolerating surrounding whitespace and one Markdown code fence."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    return json.loads(fenced.group(1).strip() if fenced else stripped)


def is_refusal(text: str) -> bool:
    normalized = " ".join(text.lower().replace("\u2019", "'").split())
    return any(phrase in normalized for phrase in REFUSAL_PHRASES)


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def evaluate_check(check: Check, output: str, *, baseline_output: str | None = None) -> Verdict:
    """Judge one response; the reason says what was expected and what came back."""
    if isinstance(check, ExactCheck):
        got, want = (output.strip(), check.value.strip()) if check.strip else (output, check.value)
        if check.ignore_case:
            got, want = got.casefold(), want.casefold()
        return Verdict(True) if got == want else Verdict(False, f"expected exactly {_short(check.value)}, got {_short(output)}")
    if isinstance(check, ContainsCheck):
        hay = output.casefold() if check.ignore_case else output
        found = [n for n in check.needles if (n.casefold() if check.ignore_case else n) in hay]
        ok = len(found) == len(check.needles) if check.match == "all" else bool(found)
        missing = [n for n in check.needles if n not in found]
        return Verdict(True) if ok else Verdict(False, f"expected to contain {check.match} of {missing}, got {_short(output)}")
    if isinstance(check, RegexCheck):
        flags = re.IGNORECASE if check.ignore_case else 0
        matcher = re.fullmatch if check.full_match else re.search
        if matcher(check.pattern, output.strip() if check.full_match else output, flags):
            return Verdict(True)
        return Verdict(False, f"expected to match /{check.pattern}/, got {_short(output)}")
    if isinstance(check, JsonSchemaCheck):
        try:
            value = parse_json_output(output)
        except json.JSONDecodeError as error:
            return Verdict(False, f"not JSON ({error.msg} at column {error.colno}): {_short(output)}")
        problem = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(check.json_schema)(check.json_schema).iter_errors(value)
        )
        if problem is None:
            return Verdict(True)
        where = "/".join(str(p) for p in problem.absolute_path) or "(root)"
        return Verdict(False, f"schema violation at {where}: {problem.message}")
    if isinstance(check, RefusalCheck):
        refused = is_refusal(output)
        if refused == check.expect_refusal:
            return Verdict(True)
        return Verdict(False, f"expected {'a refusal' if check.expect_refusal else 'an answer, not a refusal'}, got {_short(output)}")
    if baseline_output is None:
        return Verdict(False, "no baseline output to compare with")
    got, want = (output.strip(), baseline_output.strip()) if check.strip else (output, baseline_output)
    if got == want:
        return Verdict(True)
    index = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return Verdict(False, f"differs from baseline at character {index}: got {_short(got[index:], 30)}, baseline {_short(want[index:], 30)}")


@dataclass(slots=True)
class ClassAccuracy:
    passed: int = 0
    total: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def accuracy_pct(self) -> float:
        return 100.0 * self.passed / self.total if self.total else 0.0


Responses = Mapping[str, Mapping[str, RequestRecord]]  # variant -> case id -> record


def golden_accuracy(
    cases: Sequence[GoldenCase], responses: Responses, baseline: str
) -> dict[str, dict[str, ClassAccuracy]]:
    """Accuracy per variant per class; a failed or missing request counts as a wrong answer."""
    base = responses.get(baseline, {})
    out: dict[str, dict[str, ClassAccuracy]] = {}
    for variant, records in responses.items():
        per_class = out.setdefault(variant, {})
        for case in cases:
            row = per_class.setdefault(case.prompt_class, ClassAccuracy())
            row.total += 1
            record = records.get(case.id)
            if record is None:
                verdict = Verdict(False, "no response")
            elif not record.ok:
                verdict = Verdict(False, f"request failed ({record.error_kind}: {record.error_message})")
            else:
                base_record = base.get(case.id)
                base_text = base_record.output_text if base_record is not None and base_record.ok else None
                verdict = evaluate_check(case.check, record.output_text, baseline_output=base_text)
            if verdict.passed:
                row.passed += 1
            else:
                row.failures.append(f"{case.id}: {verdict.reason}")
    return out


def check_gate_classes(settings: GoldenGate, cases: Sequence[GoldenCase], where: str = "gates") -> None:
    """InputError when a per-class allowance names a class the golden set does not have: a misspelt
    class would silently fall back to the default allowance."""
    known = sorted({case.prompt_class for case in cases})
    for key, table in (("class_max_drop_points", settings.class_max_drop_points),
                       ("class_min_accuracy_pct", settings.class_min_accuracy_pct)):
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise InputError(f"{where}: golden.{key} names {', '.join(map(repr, unknown))}, not a class of the golden "
                             f"set ({', '.join(known)}); a misspelt class would get the default allowance")


def evaluate_golden(
    cases: Sequence[GoldenCase], responses: Responses, baseline: str, settings: GoldenGate
) -> StageResult:
    """No class of a speculative variant may fall below the baseline beyond its allowance (exit 11)."""
    if baseline not in responses:
        raise InputError(f"golden: no responses from the baseline variant {baseline!r}")
    accuracy = golden_accuracy(cases, responses, baseline)
    base = accuracy[baseline]
    failures: list[str] = []
    details: list[str] = []
    for variant, per_class in accuracy.items():
        for prompt_class, row in sorted(per_class.items()):
            line = f"{variant} {prompt_class}: {row.passed}/{row.total} = {row.accuracy_pct:.1f}%"
            problems: list[str] = []
            if variant != baseline:
                drop = base[prompt_class].accuracy_pct - row.accuracy_pct
                allowed = settings.drop_allowed(prompt_class)
                line += f" (baseline {base[prompt_class].accuracy_pct:.1f}%, drop {drop:.1f} points, allowed {allowed:.1f})"
                if drop > allowed + 1e-9:
                    problems.append(f"{line}: accuracy fell {drop:.1f} points, more than {allowed:.1f}")
            minimum = settings.min_accuracy(prompt_class)
            if row.accuracy_pct < minimum - 1e-9:
                problems.append(f"{line}: below the minimum {minimum:.1f}%")
            failures.extend(problems)
            if not problems:
                details.append(line)
            details.extend(f"  {variant} {failure}" for failure in row.failures)
    variants = [v for v in accuracy if v != baseline]
    summary = (
        f"golden set: {len(cases)} cases, {len(failures)} class gates failed"
        if failures else f"golden set: {len(cases)} cases, every class of {', '.join(variants) or 'no variant'} within its allowance"
    )
    metrics = {
        variant: {c: {"passed": r.passed, "total": r.total, "accuracy_pct": r.accuracy_pct} for c, r in per_class.items()}
        for variant, per_class in accuracy.items()
    }
    return StageResult.of(GOLDEN, failures, summary, details, {"accuracy": metrics})
