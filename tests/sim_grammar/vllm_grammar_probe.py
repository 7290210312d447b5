"""Runs inside the cached vLLM 0.33 venv (scripts/vllm_parser_env.sh), not under speclab's venv.

Reads one JSON object on stdin: ``model_dir``; ``requests``, a list of ``{"chat": bool, "body": {...}}``;
and ``walks``, a list of ``{"kind", "value", "tokens", "disable_any_whitespace",
"disable_additional_properties"}``. For each request it runs vLLM's own path with the guidance
backend (request model, ``extract_structured_outputs``, ``SamplingParams._validate_structured_outputs``,
``get_structured_output_key``, ``serialize_guidance_grammar``) and prints whether vLLM accepts it,
its error text and ``param``, the key and the grammar. For each walk it builds vLLM's llguidance
tokenizer from the model directory (``GuidanceBackend._build_ll_tokenizer``) and prints the token
bitmask before each token as hex, then after the last.
"""

from __future__ import annotations

import json
import os
import sys
import types

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

# vLLM imports these two backends inside the validation function; their libraries are not in
# the parser venv and the guidance path never calls them.
for _name, _fn in (("backend_lm_format_enforcer", "validate_structured_output_request_lm_format_enforcer"),
                   ("backend_outlines", "validate_structured_output_request_outlines")):
    _mod = types.ModuleType(f"vllm.v1.structured_output.{_name}")
    setattr(_mod, _fn, lambda *a, **k: None)
    sys.modules[_mod.__name__] = _mod

import llguidance  # noqa: E402
import numpy as np  # noqa: E402
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from vllm.config.structured_outputs import StructuredOutputsConfig  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.entrypoints.openai.completion.protocol import CompletionRequest  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.structured_output.backend_guidance import GuidanceBackend, serialize_guidance_grammar  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions  # noqa: E402
from vllm.v1.structured_output.request import get_structured_output_key  # noqa: E402


class _ModelConfig:
    is_diffusion = False


def request(chat: bool, body: dict, tokenizer: object) -> dict:
    try:
        req = (ChatCompletionRequest if chat else CompletionRequest).model_validate(body)
        so = req.extract_structured_outputs()
        if so is None:
            return {"ok": True, "kind": None}
        params = SamplingParams(structured_outputs=so)
        params._validate_structured_outputs(_ModelConfig(), StructuredOutputsConfig(backend="guidance"), tokenizer)
        assert params.structured_outputs is not None
        kind, value = get_structured_output_key(params.structured_outputs)
        return {"ok": True, "kind": kind.name.lower(), "value": value, "grammar": serialize_guidance_grammar(kind, value)}
    except VLLMValidationError as exc:
        return {"ok": False, "error": str(exc), "param": exc.parameter}
    except Exception as exc:  # pydantic's ValidationError: a 400 whose text is pydantic's
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "param": None, "pydantic": True}


def walk(ll_tokenizer: llguidance.LLTokenizer, item: dict) -> list[str]:
    grammar = serialize_guidance_grammar(StructuredOutputOptions[item["kind"].upper()], item["value"],
                                         item.get("disable_any_whitespace", False),
                                         item.get("disable_additional_properties", False))
    matcher = llguidance.LLMatcher(ll_tokenizer, grammar, log_level=0)
    bitmask = allocate_token_bitmask(1, ll_tokenizer.vocab_size)
    masks = []
    for token in [*item["tokens"], None]:
        fill_next_token_bitmask(matcher, bitmask)
        masks.append(np.ascontiguousarray(bitmask[0]).tobytes().hex())
        if token is not None:
            assert matcher.consume_token(token), matcher.get_error()
    return masks


def main() -> None:
    job = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    with open(os.path.join(job["model_dir"], "config.json"), encoding="utf-8") as fh:
        vocab_size = json.load(fh)["vocab_size"]
    ll_tokenizer = GuidanceBackend._build_ll_tokenizer(tokenizer, vocab_size)
    out = {
        "llguidance": llguidance.__version__,
        "results": [request(r["chat"], r["body"], tokenizer) for r in job["requests"]],
        "masks": [walk(ll_tokenizer, w) for w in job["walks"]],
        "vocab_size": ll_tokenizer.vocab_size,
        "eos": ll_tokenizer.eos_token,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
