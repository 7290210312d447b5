"""Whatever is sampled under the mask until the grammar stops is a valid answer, and ends there.

The oracle is independent of llguidance: jsonschema for schemas, ``re.fullmatch`` for regexes
and for grammars (each has a regex twin), membership for choices. 40 seeds for each of 25
constraints (every schema speclab ships among them) make 1,000 constrained answers.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from speclab.sim.grammar import GrammarCompiler, GrammarOptions, GrammarSpec, serialize, spec_from_request
from speclab.sim.grammar.compiler import _close_objects

from .cases import Case, all_cases, bundled_schemas, compiler, sample, spec_of, tokenizer

SEEDS = range(40)
CASES = all_cases()


def test_every_bundled_schema_is_covered() -> None:
    assert len(bundled_schemas()) >= 10
    assert sum(c.name.startswith("bundled") for c in CASES) == len(bundled_schemas())
    kinds = {spec_of(c).kind for c in CASES}
    assert kinds == {"json", "json_object", "regex", "choice", "grammar"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sampled_answers_validate(case: Case) -> None:
    tok, spec = tokenizer(), spec_of(case)
    for seed in SEEDS:
        matcher = compiler().compile(spec)
        out = sample(matcher, np.random.default_rng(seed))
        assert out[-1] == tok.eos_token_id, f"seed {seed}: no EOS after {len(out)} tokens: {tok.decode(out)!r}"
        assert tok.eos_token_id not in out[:-1]
        text = tok.decode(out[:-1])
        assert case.check(text), f"seed {seed}: {text!r} fails {case.body}"
        assert matcher.is_terminated() and matcher.is_stopped() and matcher.error == ""


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_complete_value_allows_only_eos(case: Case) -> None:
    """A constrained answer ends when the value is complete: no trailing whitespace, nothing but EOS."""
    tok, spec = tokenizer(), spec_of(case)
    space, newline = tok.encode(" "), tok.encode("\n")
    for seed in range(5):
        matcher = compiler().compile(spec)
        out = sample(matcher, np.random.default_rng(seed))
        matcher.rollback(1)
        if matcher.is_stopped():
            assert np.flatnonzero(matcher.mask()).tolist() == [tok.eos_token_id]
            assert matcher.validate(space) == 0 and matcher.validate(newline) == 0
        else:  # a value that could go on (a regex like [a-z]+): EOS is one of the choices
            assert matcher.is_accepting() and matcher.mask()[tok.eos_token_id]
        assert matcher.num_tokens == len(out) - 1


def test_eos_is_masked_until_the_value_is_complete() -> None:
    tok = tokenizer()
    spec = spec_of(CASES[0])
    matcher = compiler().compile(spec)
    out = sample(matcher, np.random.default_rng(0))
    matcher.rollback(len(out))
    for token in out[:-1]:
        assert not matcher.mask()[tok.eos_token_id]
        assert not matcher.is_accepting()
        matcher.accept([token])
    assert matcher.is_accepting()


def _whitespace_outside_strings(text: str) -> bool:
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in " \t\r\n":
            return True
    return False


def test_disable_any_whitespace_gives_compact_json() -> None:
    tok = tokenizer()
    strict = GrammarCompiler(tok, GrammarOptions(disable_any_whitespace=True))
    flexible_seen = False
    for case in [c for c in CASES if spec_of(c).kind in ("json", "json_object")]:
        spec = spec_of(case)
        for seed in range(10):
            out = sample(strict.compile(spec), np.random.default_rng(seed))
            text = tok.decode(out[:-1])
            assert case.check(text) and not _whitespace_outside_strings(text), text
            loose = tok.decode(sample(compiler().compile(spec), np.random.default_rng(seed))[:-1])
            flexible_seen |= _whitespace_outside_strings(loose)
    assert flexible_seen  # vLLM's default lets whitespace in between tokens


def test_disable_additional_properties_closes_objects() -> None:
    tok = tokenizer()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "object", "properties": {
        "c": {"type": "string", "maxLength": 4}}}}, "required": ["a"]}
    closed = json.loads(json.dumps(schema))
    _close_objects(closed)
    assert closed["additionalProperties"] is False and closed["properties"]["b"]["additionalProperties"] is False
    spec = spec_from_request({"structured_outputs": {"json": schema}}, chat=True)
    assert isinstance(spec, GrammarSpec)
    strict = GrammarCompiler(tok, GrammarOptions(disable_additional_properties=True))
    validator = jsonschema.Draft202012Validator(closed)
    extra_seen = False
    for seed in range(30):
        value = json.loads(tok.decode(sample(strict.compile(spec), np.random.default_rng(seed))[:-1]))
        assert validator.is_valid(value), value
        open_value = json.loads(tok.decode(sample(compiler().compile(spec), np.random.default_rng(seed))[:-1]))
        extra_seen |= not validator.is_valid(open_value)
    assert extra_seen  # by default, as in vLLM's guidance backend, other keys may appear


def test_strict_false_and_true_compile_the_same_grammar() -> None:
    schema = bundled_schemas()[0]
    specs = [spec_from_request({"response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "schema": schema, **extra}}}, chat=True) for extra in ({}, {"strict": True}, {"strict": False})]
    assert len({serialize(s) for s in specs if s is not None}) == 1
