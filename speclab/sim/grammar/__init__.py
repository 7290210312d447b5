"""Structured outputs for the simulator: vLLM 0.33's request checks and its llguidance backend.

``spec_from_request`` reads a request body's ``response_format`` / ``structured_outputs`` into a
``GrammarSpec`` (or refuses it with vLLM's HTTP 400 wording); ``GrammarCompiler.compile`` turns a
spec into a per-request ``GrammarMatcher`` over the model's vocabulary, whose masks constrain the
plain and the speculative path alike.
"""

from __future__ import annotations

from .compiler import GrammarCompiler, GrammarOptions, ll_tokenizer, serialize, validate
from .matcher import GrammarMatcher, apply_mask, unpack_bitmask
from .spec import GrammarError, GrammarKind, GrammarSpec, spec_from_request

__all__ = [
    "GrammarCompiler",
    "GrammarError",
    "GrammarKind",
    "GrammarMatcher",
    "GrammarOptions",
    "GrammarSpec",
    "apply_mask",
    "ll_tokenizer",
    "serialize",
    "spec_from_request",
    "unpack_bitmask",
    "validate",
]
