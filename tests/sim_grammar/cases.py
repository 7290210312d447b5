"""Constraints the grammar tests run: speclab's own schemas, a few harder ones, regexes, choices, grammars.

Each case knows how to judge an answer without llguidance (jsonschema, ``re.fullmatch``,
membership), so a test that samples under a mask checks the mask against an independent oracle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import tomllib

from speclab.sim.grammar import GrammarCompiler, GrammarMatcher, GrammarSpec, spec_from_request
from speclab.sim.tokenizer import SimTokenizer, load_tokenizer

BUNDLED = Path(__file__).resolve().parents[2] / "speclab" / "bundled" / "scenarios"
MODEL = "sim-8b"


def bundled_schemas() -> list[dict[str, Any]]:
    """Every distinct schema speclab ships: tool-call prompts, the golden set, the mixed scenario's class."""
    seen: dict[str, dict[str, Any]] = {}
    for path in (BUNDLED / "prompts" / "tool_call.jsonl", BUNDLED / "golden" / "tool_call.jsonl"):
        for line in path.read_text().splitlines():
            case = json.loads(line)
            schema = case.get("schema") or case.get("check", {}).get("schema")
            if schema:
                seen.setdefault(json.dumps(schema, sort_keys=True), schema)
    mixed = tomllib.loads((BUNDLED / "mixed.toml").read_text())
    schema = mixed["classes"]["tool_call"]["schema"]
    seen.setdefault(json.dumps(schema, sort_keys=True), schema)
    return list(seen.values())


EXTRA_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                      "days": {"type": "integer", "minimum": 1, "maximum": 14},
                                      "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]},
                                               "minItems": 1, "maxItems": 3},
                                      "ok": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
     "required": ["city", "days", "tags"]},
    {"type": "object", "properties": {"choice": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}]},
                                      "nested": {"type": "object", "properties": {"x": {"type": "number"}},
                                                 "required": ["x"], "additionalProperties": False}},
     "required": ["choice", "nested"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 4},
    {"$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                        "additionalProperties": False}},
     "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 3}},
     "required": ["items"], "additionalProperties": False},
]

# llguidance's \d is Unicode's (the Rust regex crate, Unicode 16), wider than this Python's tables: use [0-9].
REGEXES = [r"[0-9]{4}-[0-9]{2}-[0-9]{2}", r"(yes|no), because [a-z]{1,8}\.", r"[0-9]{3}-[0-9]{4}\s[a-z]{1,4}",
           r"[A-Z][a-z]+( [A-Z][a-z]+)?"]
CHOICES = [["positive", "negative", "neutral"], ["yes", "no", "maybe later", "no way"]]
GRAMMARS: list[tuple[str, str]] = [  # (grammar text, an equivalent Python regex)
    ('start: expr\nexpr: term (("+" | "-") term)*\nterm: /[0-9]{1,3}/', r"[0-9]{1,3}([+-][0-9]{1,3})*"),
    ('root ::= answer " " digits\nanswer ::= "yes" | "no"\ndigits ::= [0-9] [0-9]?', r"(yes|no) [0-9][0-9]?"),
]


@dataclass(frozen=True)
class Case:
    """A request body fragment that constrains the answer, and the oracle that judges an answer."""

    name: str
    body: dict[str, Any]
    check: Callable[[str], bool]


def _schema_check(schema: dict[str, Any]) -> Callable[[str], bool]:
    validator = jsonschema.Draft202012Validator(schema)

    def check(text: str) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return validator.is_valid(value)
    return check


def _regex_check(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda text: compiled.fullmatch(text) is not None


def _member_check(choices: list[str]) -> Callable[[str], bool]:
    return lambda text: text in choices


def all_cases() -> list[Case]:
    cases = [Case(f"bundled{i}", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "tool_call", "schema": schema, "strict": True}}}, _schema_check(schema))
        for i, schema in enumerate(bundled_schemas())]
    cases += [Case(f"extra{i}", {"structured_outputs": {"json": schema}}, _schema_check(schema))
              for i, schema in enumerate(EXTRA_SCHEMAS)]
    cases.append(Case("json_object", {"response_format": {"type": "json_object"}}, _schema_check({"type": "object"})))
    cases += [Case(f"regex{i}", {"structured_outputs": {"regex": r}}, _regex_check(r)) for i, r in enumerate(REGEXES)]
    cases += [Case(f"choice{i}", {"structured_outputs": {"choice": c}}, _member_check(c)) for i, c in enumerate(CHOICES)]
    cases += [Case(f"grammar{i}", {"structured_outputs": {"grammar": g}}, _regex_check(r))
              for i, (g, r) in enumerate(GRAMMARS)]
    return cases


@cache
def tokenizer() -> SimTokenizer:
    return load_tokenizer(MODEL)


@cache
def compiler() -> GrammarCompiler:
    return GrammarCompiler(tokenizer())


@cache
def closers() -> np.ndarray:
    """Tokens that tend to end what is open (quotes, brackets, commas, EOS): the sampler leans on them."""
    tok = tokenizer()
    flags = np.zeros(tok.vocab_size, bool)
    for token_id in range(tok.vocab_size):
        text = tok.decode([token_id], skip_special_tokens=False)
        flags[token_id] = any(ch in text for ch in '"}],') or token_id == tok.eos_token_id
    return flags


def sample(matcher: GrammarMatcher, rng: np.random.Generator, max_tokens: int = 1500) -> list[int]:
    """Tokens drawn at random from the mask until the grammar accepts EOS (or ``max_tokens``).

    Half the draws are uniform over the allowed tokens, half over the allowed "closers", so long
    strings and arrays end in a few tokens rather than thousands.
    """
    out: list[int] = []
    lean = closers()
    while not matcher.is_terminated() and len(out) < max_tokens:
        allowed = np.flatnonzero(matcher.mask())
        assert allowed.size, f"empty mask after {out}"
        pool = allowed
        if rng.random() < 0.5:
            closing = allowed[lean[allowed]]
            if closing.size:
                pool = closing
        token = int(rng.choice(pool))
        assert matcher.accept([token]), matcher.error
        out.append(token)
    return out


def spec_of(case: Case) -> GrammarSpec:
    spec = spec_from_request(case.body, chat=True)
    assert spec is not None
    return spec
