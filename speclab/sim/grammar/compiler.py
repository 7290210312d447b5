"""Compiling a constraint into an llguidance matcher over the simulator's vocabulary.

This is vLLM 0.33's guidance backend (``vllm/v1/structured_output/backend_guidance.py``) over
the simulator's tokenizer: the same llguidance tokenizer construction (the ``tokenizers`` JSON,
padding and truncation off, the model's EOS), the same grammar for each kind
(``serialize_guidance_grammar``: JSON schemas and ``json_object`` with flexible whitespace unless
the server disables it, regex / choice / Lark-or-GBNF grammars through ``llguidance.grammar_from``),
and the same two checks: the front end's validation without a tokenizer (HTTP 400 "Grammar error:
..." or "Invalid grammar specification: ..."), then compilation against the tokenizer.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import llguidance
from tokenizers import Tokenizer

from ..tokenizer import SimTokenizer
from .matcher import GrammarMatcher
from .spec import GrammarError, GrammarSpec

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

_SCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SUBSCHEMAS: Final = ("additionalProperties", "unevaluatedProperties", "propertyNames", "contains", "additionalItems",
                      "unevaluatedItems", "not", "if", "then", "else", "contentSchema", "items", "prefixItems",
                      "allOf", "anyOf", "oneOf")


@dataclass(frozen=True, slots=True)
class GrammarOptions:
    """The server-wide ``--structured-outputs-config`` keys that change a grammar; vLLM's defaults."""

    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False


def _close_objects(node: Any) -> None:
    """vLLM's ``_walk_json_for_additional_properties``: objects with properties get additionalProperties false."""
    if isinstance(node, list):
        for item in node:
            if isinstance(item, dict):
                _close_objects(item)
        return
    if not isinstance(node, dict):
        return
    for key in _SCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for sub in value.values():
                if isinstance(sub, dict):
                    _close_objects(sub)
    for key in _SUBSCHEMAS:
        value = node.get(key)
        if isinstance(value, (dict, list)):
            _close_objects(value)
    if "additionalProperties" not in node and (isinstance(node.get("properties"), dict)
                                               or isinstance(node.get("patternProperties"), dict)):
        node["additionalProperties"] = False


def serialize(spec: GrammarSpec, options: GrammarOptions | None = None) -> str:
    """The llguidance grammar vLLM builds for ``spec`` (``serialize_guidance_grammar``).

    Raises ValueError / KeyError / TypeError where llguidance or the JSON parser does, as in vLLM.
    """
    opts = options or GrammarOptions()
    defaults: JsonCompileOptions = {"whitespace_flexible": not opts.disable_any_whitespace}
    if spec.kind == "json":
        schema: str | dict[str, Any] = spec.value
        if opts.disable_additional_properties:
            schema = json.loads(spec.value)
            _close_objects(schema)
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=defaults)
    if spec.kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=defaults)
    return llguidance.grammar_from(spec.kind, spec.value)


def validate(spec: GrammarSpec) -> None:
    """vLLM's front-end check (``validate_guidance_grammar``): GrammarError worded as its HTTP 400."""
    try:
        grammar = serialize(spec)
    except (ValueError, KeyError, TypeError) as exc:
        raise GrammarError(f"Invalid grammar specification: {exc}") from None
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    if error:
        raise GrammarError(f"Grammar error: {error}")


def ll_tokenizer(tokenizer: SimTokenizer, vocab_size: int | None = None) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for a simulator tokenizer, as ``llguidance.hf.from_tokenizer`` builds it.

    vLLM hands llguidance the fast tokenizer's ``tokenizers`` JSON with padding and truncation
    off, a vocabulary of max(model vocab_size, len(tokenizer)), and the tokenizer's EOS id.
    """
    backend = Tokenizer.from_str(tokenizer.backend.to_str())
    backend.no_padding()
    backend.no_truncation()
    n_vocab = max(vocab_size or 0, tokenizer.vocab_size)
    return llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=tokenizer.eos_token_id)


class GrammarCompiler:
    """Per-request matchers for one model's vocabulary; one per engine.

    vLLM compiles every request's grammar afresh (on a thread, while the request waits). Here each
    distinct constraint is validated and compiled once and every request gets a copy of the fresh
    matcher (about a microsecond), because a workload repeats a few schemas thousands of times.
    """

    def __init__(self, tokenizer: SimTokenizer, options: GrammarOptions | None = None, *,
                 vocab_size: int | None = None, cache_size: int = 256) -> None:
        self.options = options or GrammarOptions()
        self.tokenizer = ll_tokenizer(tokenizer, vocab_size)
        self.vocab_size = self.tokenizer.vocab_size
        self.eos_token_id = tokenizer.eos_token_id
        self._cache_size = cache_size
        self._fresh: OrderedDict[tuple[str, str], llguidance.LLMatcher] = OrderedDict()

    def compile(self, spec: GrammarSpec) -> GrammarMatcher:
        """A matcher at the start of ``spec``; GrammarError (vLLM's wording) when vLLM would refuse it."""
        key = (spec.kind, spec.value)
        fresh = self._fresh.get(key)
        if fresh is None:
            validate(spec)
            try:
                grammar = serialize(spec, self.options)
            except (ValueError, KeyError, TypeError) as exc:
                raise GrammarError(f"Invalid grammar specification: {exc}") from None
            fresh = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
            if error := fresh.get_error():
                raise GrammarError(f"Invalid structured outputs: Grammar error: {error}")
            self._fresh[key] = fresh
            if len(self._fresh) > self._cache_size:
                self._fresh.popitem(last=False)
        else:
            self._fresh.move_to_end(key)
        return GrammarMatcher(fresh.deep_copy(), self.vocab_size, self.eos_token_id)
