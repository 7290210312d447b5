"""The bundled prompt files and golden set, generated alongside the corpus.

Prompts (``scenarios/prompts/<class>.jsonl``): ``{"messages", "class", "max_tokens"}`` and, for
tool calls, ``"schema"`` (the JSON schema of the call). Golden cases
(``scenarios/golden/<class>.jsonl``): ``{"id", "class", "messages", "max_tokens", "check"}``; the
check kinds are documented in ``scenarios/golden/README.md``. Questions are real facts phrased
naturally, so a real instruction model passes them too.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Final

from .corpus_facts import FACTS, HARMFUL_PHRASINGS, HARMFUL_REQUESTS, TOOL_PHRASINGS
from .corpus_prose import story

BUNDLED: Final = Path(__file__).resolve().parent.parent / "bundled" / "scenarios"
TOOL_SYSTEM: Final = (
    "You can call these tools: get_weather(city, unit), search_flights(origin, destination, date), "
    "convert_currency(amount, from_currency, to_currency), get_stock_price(ticker). "
    'Reply with exactly one JSON object {"name": ..., "arguments": {...}}.'
)
_ARG_TYPES: Final[dict[str, dict[str, Any]]] = {
    "get_weather": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "search_flights": {"origin": {"type": "string"}, "destination": {"type": "string"},
                       "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}},
    "convert_currency": {"amount": {"type": "number"}, "from_currency": {"type": "string"},
                         "to_currency": {"type": "string"}},
    "get_stock_price": {"ticker": {"type": "string"}},
}


def tool_schema(tool: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """JSON schema of a call to ``tool``; with ``values``, each argument must equal the given one."""
    props = {k: dict(v) for k, v in _ARG_TYPES[tool].items()}
    if values is not None:
        for key, value in values.items():
            props[key]["const"] = value
    return {
        "type": "object",
        "properties": {
            "name": {"const": tool},
            "arguments": {"type": "object", "properties": props, "required": list(props),
                          "additionalProperties": False},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_messages(tool: str, phrasing: int, args: dict[str, Any]) -> list[dict[str, str]]:
    text = TOOL_PHRASINGS[tool][phrasing % len(TOOL_PHRASINGS[tool])].format(**args)
    return [{"role": "system", "content": TOOL_SYSTEM}, {"role": "user", "content": text}]


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _fact_cases() -> list[tuple[list[dict[str, str]], str]]:
    cases = []
    for i, (_kind, (questions, _answer, pairs)) in enumerate(FACTS.items()):
        for j, (subject, value) in enumerate(pairs[:3]):
            cases.append((_user(questions[(i + j) % len(questions)].format(s=subject)), value))
    return cases


def _tool_cases(rng: random.Random, count: int) -> list[tuple[str, list[dict[str, str]], dict[str, Any]]]:
    from .corpus import random_tool_args

    tools = list(TOOL_PHRASINGS)
    out = []
    for i in range(count):
        tool = tools[i % len(tools)]
        args = random_tool_args(tool, rng)
        out.append((tool, tool_messages(tool, i + 1, args), args))
    return out


def _refusal_prompts() -> list[list[dict[str, str]]]:
    return [_user(HARMFUL_PHRASINGS[i % len(HARMFUL_PHRASINGS)].format(r=r))
            for i, r in enumerate(HARMFUL_REQUESTS[:12])]


def _continuation_prompts(rng: random.Random, count: int) -> list[list[dict[str, str]]]:
    prompts = [_user(f"Continue the story: {story(rng)[0]}") for _ in range(count - 3)]
    prompts += [_user(f"Write a short essay about {t}.") for t in ("public libraries", "rivers", "old maps")]
    return prompts


def build_sets() -> dict[str, dict[str, list[dict[str, Any]]]]:
    rng = random.Random(7)
    prompts: dict[str, list[dict[str, Any]]] = {}
    golden: dict[str, list[dict[str, Any]]] = {}
    facts = _fact_cases()
    prompts["factual_qa"] = [{"messages": m, "class": "factual_qa", "max_tokens": 32} for m, _ in facts]
    golden["factual_qa"] = [
        {"id": f"factual_qa-{i:02d}", "class": "factual_qa", "messages": m, "max_tokens": 32,
         "check": ({"kind": "regex", "pattern": rf"\b{value}\b"} if value.isdigit()
                   else {"kind": "contains", "value": value, "ignore_case": True})}
        for i, (m, value) in enumerate(facts[::2])
    ]
    tools = _tool_cases(rng, 24)
    prompts["tool_call"] = [{"messages": m, "class": "tool_call", "max_tokens": 64, "schema": tool_schema(t)}
                            for t, m, _ in tools[:16]]
    golden["tool_call"] = [
        {"id": f"tool_call-{i:02d}", "class": "tool_call", "messages": m, "max_tokens": 64,
         "check": {"kind": "json_schema", "schema": tool_schema(t, args)}}
        for i, (t, m, args) in enumerate(tools[16:])
    ]
    continuation = _continuation_prompts(rng, 15)
    prompts["long_continuation"] = [{"messages": m, "class": "long_continuation", "max_tokens": 160}
                                    for m in continuation[:12]]
    golden["long_continuation"] = [
        {"id": f"long_continuation-{i:02d}", "class": "long_continuation", "messages": m, "max_tokens": 128,
         "check": {"kind": "baseline_equal"}}
        for i, m in enumerate(continuation[9:])
    ]
    refusals = _refusal_prompts()
    prompts["refusal"] = [{"messages": m, "class": "refusal", "max_tokens": 48} for m in refusals]
    golden["refusal"] = [
        {"id": f"refusal-{i:02d}", "class": "refusal", "messages": m, "max_tokens": 48, "check": {"kind": "refusal"}}
        for i, m in enumerate(refusals[::2])
    ]
    return {"prompts": prompts, "golden": golden}


def write_sets(root: Path = BUNDLED) -> list[Path]:
    written = []
    for folder, by_class in build_sets().items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for cls, lines in by_class.items():
            path = root / folder / f"{cls}.jsonl"
            path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
            written.append(path)
    return written
