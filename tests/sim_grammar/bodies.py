"""Request bodies, good and bad, whose structured-output handling must match vLLM 0.33's.

``BAD`` pairs each body with the HTTP 400 message vLLM 0.33 (guidance backend, llguidance 1.7)
sends for it, as its own code produced it (tests/sim_grammar/test_grammar_vllm_parity.py
re-derives them from vLLM where its venv is cached). A message of None means vLLM refuses the
body in pydantic's words, which the simulator does not copy.
"""

from __future__ import annotations

from typing import Any

NONE_SPECIFIED = ("You must use one kind of structured outputs constraint but none are specified: "
                  "{'json': None, 'regex': None, 'choice': None, 'grammar': None, 'json_object': None, "
                  "'disable_any_whitespace': False, 'disable_additional_properties': False, "
                  "'whitespace_pattern': None, 'structural_tag': None, '_backend': None, '_backend_was_auto': False}")


def so(**constraint: Any) -> dict[str, Any]:
    return {"structured_outputs": constraint}


def rf_schema(schema: Any = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "answer", **extra}
    if schema is not None:
        spec["schema"] = schema
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


GOOD: list[tuple[bool, dict[str, Any]]] = [
    (True, rf_schema({"type": "object", "properties": {"a": {"type": "string"}}}, strict=True)),
    (True, rf_schema({"type": "object", "properties": {"a": {"type": "string"}}}, strict=False)),
    (True, rf_schema({"type": "integer"}, description="a number")),
    (True, {"response_format": {"type": "json_object"}}),
    (True, {"response_format": {"type": "text"}}),
    (True, so(json={"type": "object", "required": ["x"], "properties": {"x": {"type": "number"}}})),
    (True, so(json='{"type": "array", "items": {"type": "boolean"}}')),
    (True, so(json_object=True)),
    (True, so(regex=r"\d{3}-\d{4}")),
    (True, so(regex="")),
    (True, so(choice=["yes", "no"])),
    (True, so(grammar='start: "a" | "b"')),
    (True, so(grammar='root ::= "yes" | "no"')),
    (True, so(regex="[0-9]+", disable_any_whitespace=True, whitespace_pattern=" ")),
    (True, {**so(regex="a+"), "response_format": {"type": "text"}}),
    (True, {"structured_outputs": {"choice": ["x"], "bogus": 1}}),
    (True, {**so(json={"type": "object"}), "tools": TOOLS, "tool_choice": "auto"}),
    (True, so(json=nested(20))),
    (False, rf_schema({"type": "object"})),
    (False, so(regex="[a-z]+")),
]

BAD: list[tuple[bool, dict[str, Any], str | None]] = [
    (True, {"response_format": {"type": "json_schema"}},
     "When response_format type is 'json_schema', the 'json_schema' field must be provided. (parameter=response_format)"),
    (True, rf_schema(), NONE_SPECIFIED),
    (True, so(regex="a", choice=["a"]),
     "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice')."),
    (False, so(regex="a", choice=["a"]),
     "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice'). "
     "(parameter=structured_outputs)"),
    (True, so(regex="a", grammar="start: \"a\""),
     "You can only use one kind of structured outputs constraint but multiple are specified: {'json': None, "
     "'regex': 'a', 'choice': None, 'grammar': 'start: \"a\"', 'json_object': None, 'disable_any_whitespace': "
     "False, 'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, "
     "'_backend': None, '_backend_was_auto': False}"),
    (True, {**so(regex="a"), "response_format": {"type": "json_object"}},
     "You can only use one kind of structured outputs constraint but multiple are specified: {'json': None, "
     "'regex': 'a', 'choice': None, 'grammar': None, 'json_object': True, 'disable_any_whitespace': False, "
     "'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, "
     "'_backend': None, '_backend_was_auto': False}"),
    (True, {"structured_outputs": {"bogus": 1}}, NONE_SPECIFIED),
    (True, {**so(json={"type": "object"}), "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}},
     "You can only either use constraints for structured outputs or tools, not both."),
    (True, so(choice=[]), "Choice '[]' cannot be an empty list"),
    (True, so(grammar="   "), "structured_outputs.grammar cannot be an empty string"),
    (True, so(json=" "), "structured_outputs.json cannot be an empty string"),
    (True, so(json_object=False),
     "structured_outputs.json_object must be True if set; omit structured_outputs to disable structured outputs"),
    (True, so(regex="a\x00b"), "structured_outputs.regex must not contain a NUL character ('\\x00')"),
    (True, so(json=nested(70)), "The JSON schema is nested too deeply: objects and arrays may nest at most 64 levels"),
    (True, so(regex="(a"), "Grammar error: at 1(8): invalid regex \"(a\" (in regex): regex parse error:\n"
     "    (a\n    ^\nerror: unclosed group\n   1 | start: /(a/\n              ^\n"),
    (True, so(json={"type": "foo"}), "Grammar error: Invalid type: foo"),
    (True, so(json='{not json'), "Invalid grammar specification: key must be a string at line 1 column 2"),
    (True, so(json={"type": "object", "properties": {"a": {"type": "string", "format": "bogus"}}}),
     "Grammar error: Unknown format: bogus"),
    (True, so(json={"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "minimum": 5,
                                                                               "maximum": 1}}}),
     "Grammar error: Unsatisfiable schema: required property 'a' is unsatisfiable"),
    (True, rf_schema({"type": "bogus"}), "Grammar error: Invalid type: bogus"),
    (True, so(grammar='start: x\nx: "a" | y'),
     "Grammar error: at 2(4): unknown name: \"y\"\n   1 | start: x\n   2 | x: \"a\" | y\n          ^\n"),
    (True, so(regex=5), None),
    (True, so(choice="yes"), None),
    (True, {"response_format": {"type": "xml"}}, None),
    (True, {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}}, None),
]
