"""A request's structured-output constraint, read the way vLLM 0.33's OpenAI front end reads it.

vLLM checks the constraint in three places before the engine sees it: the request model's
validators (``json_schema`` present, at most one of json/regex/choice, not with a named tool),
the ``StructuredOutputsParams`` dataclass (exactly one kind, after ``response_format`` has been
folded onto ``structured_outputs``), and ``SamplingParams._validate_structured_outputs`` (empty
choice, empty grammar or schema string, nesting depth, ``json_object: false``, NUL in a regex).
This module repeats those checks in that order with vLLM's wording, so a client that sends a bad
constraint gets the HTTP 400 it would get from vLLM. Grammar-level errors (a schema or regex the
engine cannot compile) come from llguidance itself, in ``compiler.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..errors import RequestRejectedError

GrammarKind = Literal["json", "json_object", "regex", "choice", "grammar"]

MAX_JSON_NESTING: Final = 64  # vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING
CONSTRAINTS: Final = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_OPTIONS: Final = ("disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
_FIELD_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "json": (str, dict), "regex": (str,), "choice": (list,), "grammar": (str,), "json_object": (bool,),
    "structural_tag": (str,), "disable_any_whitespace": (bool,), "disable_additional_properties": (bool,),
    "whitespace_pattern": (str,),
}


class GrammarError(RequestRejectedError):
    """A structured-output constraint vLLM refuses with HTTP 400 ``BadRequestError``; ``param`` as vLLM sets it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """One request's constraint as vLLM's ``get_structured_output_key`` keys it: a kind and a string.

    ``value`` is the JSON text of a schema or choice list, the regex, the grammar, or "" for
    ``json_object``. ``ignored`` names what the request set that vLLM 0.33 accepts but does not
    act on (so the server can say so rather than drop it silently).
    """

    kind: GrammarKind
    value: str
    source: Literal["response_format", "structured_outputs"]
    ignored: tuple[str, ...] = ()

    @property
    def schema(self) -> Any:
        """The JSON schema a ``json`` / ``json_object`` answer must satisfy (None for other kinds)."""
        if self.kind == "json_object":
            return {"type": "object"}
        return json.loads(self.value) if self.kind == "json" else None

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(json.loads(self.value)) if self.kind == "choice" else ()


def _validation_error(message: str, parameter: str | None = None) -> GrammarError:
    """vLLM's VLLMValidationError: the parameter is appended to the message and sent as ``param``."""
    return GrammarError(f"{message} (parameter={parameter})" if parameter else message, parameter)


def _check_request(body: Mapping[str, Any], chat: bool) -> None:
    """The chat / completion request model's ``mode="before"`` validators."""
    so = body.get("structured_outputs")
    if isinstance(so, Mapping):
        if sum(so.get(k) is not None for k in ("json", "regex", "choice")) > 1:
            raise _validation_error(
                "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
                None if chat else "structured_outputs")
        if chat and any(so.get(k) is not None for k in ("json", "regex", "choice")) and \
                body.get("tool_choice", "none") not in ("none", "auto", "required"):
            raise _validation_error("You can only either use constraints for structured outputs or tools, not both.")
    rf = body.get("response_format")
    if isinstance(rf, Mapping) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise _validation_error("When response_format type is 'json_schema', the 'json_schema' field must be "
                                "provided.", "response_format")


def _params_repr(params: dict[str, Any]) -> str:
    """``StructuredOutputsParams.__dict__`` as vLLM prints it in its count errors."""
    shown = {k: params.get(k) for k in ("json", "regex", "choice", "grammar", "json_object")}
    shown |= {"disable_any_whitespace": params.get("disable_any_whitespace", False),
              "disable_additional_properties": params.get("disable_additional_properties", False),
              "whitespace_pattern": params.get("whitespace_pattern"), "structural_tag": params.get("structural_tag"),
              "_backend": None, "_backend_was_auto": False}
    return repr(shown)


def _check_count(params: dict[str, Any]) -> None:
    """``StructuredOutputsParams.__post_init__``: exactly one kind of constraint."""
    count = sum(params.get(k) is not None for k in CONSTRAINTS)
    if count > 1:
        raise GrammarError("You can only use one kind of structured outputs constraint but multiple are "
                           f"specified: {_params_repr(params)}")
    if count < 1:
        raise GrammarError("You must use one kind of structured outputs constraint but none are specified: "
                           f"{_params_repr(params)}")


def _structured_outputs(so: Any) -> tuple[dict[str, Any], list[str]]:
    """The ``structured_outputs`` object as vLLM's dataclass holds it, and the keys it drops."""
    if not isinstance(so, Mapping):
        raise GrammarError("structured_outputs: Input should be an object", "structured_outputs")
    params: dict[str, Any] = {}
    for key, value in so.items():
        if key not in _FIELD_TYPES:
            continue
        if value is not None and not isinstance(value, _FIELD_TYPES[key]):
            expected = " or ".join("a string" if t is str else "an object" if t is dict else "a list" if t is list
                                   else "a boolean" for t in _FIELD_TYPES[key])
            raise GrammarError(f"structured_outputs.{key}: Input should be {expected}", "structured_outputs")
        params[key] = value
    if isinstance(params.get("choice"), list) and not all(isinstance(c, str) for c in params["choice"]):
        raise GrammarError("structured_outputs.choice: every choice should be a string", "structured_outputs")
    dropped = [f"structured_outputs.{k}" for k in so if k not in _FIELD_TYPES]
    return params, dropped


def _response_format(rf: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """``response_format`` as the overrides vLLM folds onto ``structured_outputs`` (None for text)."""
    if not isinstance(rf, Mapping):
        raise GrammarError("response_format: Input should be an object", "response_format")
    kind = rf.get("type")
    if kind == "text":
        return None, []
    if kind == "json_object":
        return {"json_object": True}, []
    if kind == "structural_tag":
        raise GrammarError("speclab-sim does not model structural_tag structured outputs", "response_format")
    if kind != "json_schema":
        raise GrammarError("response_format.type: Input should be 'text', 'json_object', 'json_schema' or "
                           f"'structural_tag', got {kind!r}", "response_format")
    spec = rf["json_schema"]
    if not isinstance(spec, Mapping):
        raise GrammarError("response_format.json_schema: Input should be an object", "response_format")
    if not isinstance(spec.get("name"), str):
        raise GrammarError("response_format.json_schema.name: Field required (a string)", "response_format")
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, Mapping):
        raise GrammarError("response_format.json_schema.schema: Input should be an object", "response_format")
    ignored = ["response_format.json_schema.strict"] if spec.get("strict") is not None else []
    return {"json": None if schema is None else dict(schema)}, ignored


def _exceeds_nesting(spec: Any, limit: int) -> bool:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            return True
        except ValueError:
            return False
    level = [spec]
    for _ in range(limit):
        level = [child for node in level if isinstance(node, (dict, list))
                 for child in (node.values() if isinstance(node, dict) else node) if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


def _check_content(params: dict[str, Any]) -> None:
    """The request-content checks of ``SamplingParams._validate_structured_outputs``, in its order."""
    choice, grammar, schema, regex = params.get("choice"), params.get("grammar"), params.get("json"), params.get("regex")
    if isinstance(choice, list) and not choice:
        raise GrammarError(f"Choice '{choice}' cannot be an empty list")
    if isinstance(grammar, str) and grammar.strip() == "":
        raise GrammarError("structured_outputs.grammar cannot be an empty string")
    if isinstance(schema, str) and schema.strip() == "":
        raise GrammarError("structured_outputs.json cannot be an empty string")
    if schema and _exceeds_nesting(schema, MAX_JSON_NESTING):
        raise GrammarError("The JSON schema is nested too deeply: objects and arrays may nest at most "
                           f"{MAX_JSON_NESTING} levels")
    if params.get("json_object") is False:
        raise GrammarError("structured_outputs.json_object must be True if set; omit structured_outputs to "
                           "disable structured outputs")
    if regex and "\x00" in regex:
        raise GrammarError("structured_outputs.regex must not contain a NUL character ('\\x00')")
    if params.get("structural_tag") is not None:
        raise GrammarError("speclab-sim does not model structural_tag structured outputs", "structured_outputs")


def _key(params: dict[str, Any]) -> tuple[GrammarKind, str]:
    """vLLM's ``get_structured_output_key``: which constraint wins, and its string form."""
    if params.get("json") is not None:
        schema = params["json"]
        return "json", schema if isinstance(schema, str) else json.dumps(schema)
    if params.get("json_object"):
        return "json_object", ""
    if params.get("regex") is not None:
        return "regex", str(params["regex"])
    if params.get("choice") is not None:
        return "choice", json.dumps(params["choice"])
    return "grammar", str(params["grammar"])


def spec_from_request(body: Mapping[str, Any], *, chat: bool) -> GrammarSpec | None:
    """The constraint of one ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` body, or None.

    Raises GrammarError, worded as vLLM 0.33 words its HTTP 400, for every constraint vLLM refuses
    before compiling it. ``response_format`` overrides the same field of ``structured_outputs``, as
    in vLLM; the legacy ``guided_*`` fields are not read here (vLLM ignores them with a warning).
    """
    _check_request(body, chat)
    ignored: list[str] = []
    params: dict[str, Any] | None = None
    if body.get("structured_outputs") is not None:
        params, dropped = _structured_outputs(body["structured_outputs"])
        _check_count(params)
        ignored += dropped
    overrides: dict[str, Any] | None = None
    if body.get("response_format") is not None:
        overrides, rf_ignored = _response_format(body["response_format"])
        ignored += rf_ignored
    if overrides is not None:
        params = {**(params or {}), **overrides}
        _check_count(params)
    if params is None:
        return None
    _check_content(params)
    ignored += [f"structured_outputs.{k}" for k in _OPTIONS if params.get(k) not in (None, False)]
    kind, value = _key(params)
    from_rf = overrides is not None and overrides.get("json" if kind == "json" else kind) is not None
    source: Literal["response_format", "structured_outputs"] = "response_format" if from_rf else "structured_outputs"
    return GrammarSpec(kind, value, source, tuple(ignored))
