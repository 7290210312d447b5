"""The grammar layer against vLLM 0.33's own code, run in the cached vLLM venv.

For every request body in ``bodies.py`` vLLM's front end and guidance backend must agree with
``spec_from_request`` + ``validate``: the same verdict, the same HTTP 400 text and ``param``, the
same constraint key and the same llguidance grammar. For a sampled answer under each kind of
constraint (and under the server's whitespace and additionalProperties options), the token mask
before every token must be bit-for-bit the one vLLM's llguidance tokenizer, built from the
model directory through ``transformers``, gives. Skipped where the venv is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speclab.sim.grammar import (
    GrammarCompiler,
    GrammarError,
    GrammarOptions,
    GrammarSpec,
    serialize,
    spec_from_request,
    validate,
)
from speclab.sim.tokenizer import model_dir

from ..vllm_env import missing
from .bodies import BAD, GOOD
from .cases import MODEL, all_cases, sample, spec_of, tokenizer

pytestmark = pytest.mark.vllm_parser

VENV = Path(os.environ.get("SPECLAB_VLLM_VENV", Path.home() / ".cache" / "speclab" / "vllm-parser-venv"))
if not (VENV / ".speclab-ready").exists():
    missing(f"vLLM 0.33 parser venv not found at {VENV}; build it with scripts/vllm_parser_env.sh", module=True)

OPTIONS = [GrammarOptions(), GrammarOptions(disable_any_whitespace=True), GrammarOptions(disable_additional_properties=True)]


def _body(chat: bool, body: dict[str, Any]) -> dict[str, Any]:
    full = {"model": MODEL, **body}
    full["messages" if chat else "prompt"] = [{"role": "user", "content": "hi"}] if chat else "hi"
    return full


def _walks() -> list[dict[str, Any]]:
    walks = []
    cases = all_cases()
    for i, case in enumerate(cases):
        spec = spec_of(case)
        options = OPTIONS[i % 3] if spec.kind in ("json", "json_object") else OPTIONS[0]
        matcher = GrammarCompiler(tokenizer(), options).compile(spec)
        tokens = sample(matcher, np.random.default_rng(i))
        walks.append({"kind": spec.kind, "value": spec.value, "tokens": tokens, "options": options,
                      "disable_any_whitespace": options.disable_any_whitespace,
                      "disable_additional_properties": options.disable_additional_properties})
    return walks


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    requests = [{"chat": c, "body": _body(c, b)} for c, b in GOOD] + [{"chat": c, "body": _body(c, b)} for c, b, _ in BAD]
    walks = _walks()
    job = {"model_dir": str(model_dir(MODEL)), "requests": requests,
           "walks": [{k: v for k, v in w.items() if k != "options"} for w in walks]}
    out = subprocess.run([str(VENV / "bin" / "python"), str(Path(__file__).with_name("vllm_grammar_probe.py"))],
                         input=json.dumps(job), capture_output=True, text=True, timeout=110,
                         env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    return {"requests": requests, "walks": walks, **json.loads(out.stdout)}


def _ours(chat: bool, body: dict[str, Any]) -> dict[str, Any]:
    try:
        spec = spec_from_request(body, chat=chat)
        if spec is None:
            return {"ok": True, "kind": None}
        validate(spec)
        return {"ok": True, "kind": spec.kind, "value": spec.value, "grammar": serialize(spec)}
    except GrammarError as exc:
        return {"ok": False, "error": str(exc), "param": exc.param}


def test_requests_match_vllm(probe: dict[str, Any]) -> None:
    vllm = probe["results"]
    assert len(vllm) == len(GOOD) + len(BAD)
    for request, theirs in zip(probe["requests"], vllm, strict=True):
        ours = _ours(request["chat"], request["body"])
        label = json.dumps(request["body"])[:160]
        assert ours["ok"] == theirs["ok"], f"{label}: vLLM {theirs}, ours {ours}"
        if theirs["ok"]:
            assert (ours["kind"], ours.get("value"), ours.get("grammar")) == \
                (theirs["kind"], theirs.get("value"), theirs.get("grammar")), label
        elif not theirs.get("pydantic"):
            assert (ours["error"], ours["param"]) == (theirs["error"], theirs["param"]), label


def test_recorded_messages_are_vllms(probe: dict[str, Any]) -> None:
    """The messages bodies.py records (and the plain unit tests use) are the ones vLLM produced."""
    vllm = probe["results"][len(GOOD):]
    for (_, body, message), theirs in zip(BAD, vllm, strict=True):
        assert message == (None if theirs.get("pydantic") else theirs["error"]), json.dumps(body)[:160]


def test_masks_match_vllms_llguidance_tokenizer(probe: dict[str, Any]) -> None:
    tok = tokenizer()
    assert (probe["vocab_size"], probe["eos"]) == (tok.vocab_size, tok.eos_token_id)
    for walk, theirs in zip(probe["walks"], probe["masks"], strict=True):
        matcher = GrammarCompiler(tok, walk["options"]).compile(spec_of_walk(walk))
        assert len(theirs) == len(walk["tokens"]) + 1
        for step, token in enumerate(walk["tokens"]):
            assert matcher.bitmask().tobytes().hex() == theirs[step], (walk["kind"], walk["options"], step)
            assert matcher.accept([token])
        # after EOS vLLM's manager stops asking the matcher (it is terminated) and leaves the row open
        assert matcher.is_terminated() and matcher.mask().all()


def spec_of_walk(walk: dict[str, Any]) -> GrammarSpec:
    return GrammarSpec(walk["kind"], walk["value"], "structured_outputs")


def test_every_kind_is_walked(probe: dict[str, Any]) -> None:
    kinds = {(w["kind"], w["options"]) for w in probe["walks"]}
    assert {k for k, _ in kinds} == {"json", "json_object", "regex", "choice", "grammar"}
    assert {o for _, o in kinds} == set(OPTIONS)
    assert all(spec_of(c) for c in all_cases())
