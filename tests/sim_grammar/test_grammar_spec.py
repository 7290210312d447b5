"""Reading ``response_format`` / ``structured_outputs`` as vLLM 0.33 does, and refusing what it refuses."""

from __future__ import annotations

import json

import pytest

from speclab.model.errors import InputError
from speclab.sim.errors import RequestRejectedError
from speclab.sim.grammar import GrammarError, spec_from_request, validate

from .bodies import BAD, GOOD, nested, rf_schema, so


def _spec(body: dict, chat: bool = True):  # type: ignore[no-untyped-def]
    spec = spec_from_request(body, chat=chat)
    if spec is not None:
        validate(spec)
    return spec


@pytest.mark.parametrize(("chat", "body"), GOOD, ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else str(v))
def test_vllm_accepts_these_and_so_do_we(chat: bool, body: dict) -> None:
    _spec(body, chat)


@pytest.mark.parametrize(("chat", "body", "message"), BAD, ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else None)
def test_vllm_refuses_these_with_its_own_words(chat: bool, body: dict, message: str | None) -> None:
    with pytest.raises(GrammarError) as err:
        _spec(body, chat)
    if message is not None:
        assert str(err.value) == message
    else:
        assert str(err.value).split(":")[0] in {"structured_outputs.regex", "structured_outputs.choice",
                                                 "response_format.type", "response_format.json_schema.name"}
    assert isinstance(err.value, RequestRejectedError) and isinstance(err.value, InputError)


def test_no_constraint_is_none() -> None:
    assert spec_from_request({"messages": []}, chat=True) is None
    assert spec_from_request({"response_format": {"type": "text"}}, chat=True) is None
    assert spec_from_request({"structured_outputs": None, "response_format": None}, chat=False) is None


def test_kinds_and_their_string_forms_are_vllms_keys() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    cases = [
        (rf_schema(schema, strict=True), "json", json.dumps(schema), "response_format"),
        ({"response_format": {"type": "json_object"}}, "json_object", "", "response_format"),
        (so(json=schema), "json", json.dumps(schema), "structured_outputs"),
        (so(json='{"type":"string"}'), "json", '{"type":"string"}', "structured_outputs"),
        (so(json_object=True), "json_object", "", "structured_outputs"),
        (so(regex="[a-z]+"), "regex", "[a-z]+", "structured_outputs"),
        (so(choice=["a", "b c"]), "choice", '["a", "b c"]', "structured_outputs"),
        (so(grammar='start: "x"'), "grammar", 'start: "x"', "structured_outputs"),
    ]
    for body, kind, value, source in cases:
        spec = _spec(body)
        assert (spec.kind, spec.value, spec.source) == (kind, value, source), body


def test_schema_and_choices_for_the_checks_downstream() -> None:
    schema = {"type": "object", "required": ["a"]}
    assert _spec(rf_schema(schema)).schema == schema
    assert _spec({"response_format": {"type": "json_object"}}).schema == {"type": "object"}
    assert _spec(so(choice=["x", "y"])).choices == ("x", "y")
    assert _spec(so(regex="a")).schema is None


def test_response_format_overrides_structured_outputs_as_vllm_replaces_fields() -> None:
    body = {**so(json={"type": "integer"}), **rf_schema({"type": "string"})}
    spec = _spec(body)
    assert spec.value == json.dumps({"type": "string"}) and spec.source == "response_format"
    body = {**so(regex="[0-9]"), **rf_schema()}  # a json_schema without a schema leaves the regex standing
    assert _spec(body).kind == "regex"


def test_what_vllm_accepts_without_acting_on_it_is_named() -> None:
    spec = _spec(rf_schema({"type": "object"}, strict=True))
    assert spec.ignored == ("response_format.json_schema.strict",)
    spec = _spec({"structured_outputs": {"regex": "a", "disable_any_whitespace": True, "whitespace_pattern": " ",
                                         "disable_additional_properties": False, "bogus": 1}})
    assert spec.ignored == ("structured_outputs.bogus", "structured_outputs.disable_any_whitespace",
                            "structured_outputs.whitespace_pattern")
    assert _spec(rf_schema({"type": "object"})).ignored == ()


def test_structural_tag_is_refused_not_ignored() -> None:
    for body in ({"response_format": {"type": "structural_tag", "format": {}}},
                 so(structural_tag='{"triggers": []}')):
        with pytest.raises(GrammarError, match="does not model structural_tag"):
            spec_from_request(body, chat=True)


def test_nesting_limit_is_vllms() -> None:
    _spec(so(json=nested(62)))
    with pytest.raises(GrammarError, match="nested too deeply"):
        _spec(so(json=nested(64)))


def test_param_is_set_where_vllm_sets_it() -> None:
    with pytest.raises(GrammarError) as err:
        spec_from_request({"response_format": {"type": "json_schema"}}, chat=True)
    assert err.value.param == "response_format"
    with pytest.raises(GrammarError) as err:
        spec_from_request(so(regex="a", json={}), chat=False)
    assert err.value.param == "structured_outputs"
    with pytest.raises(GrammarError) as err:
        _spec(so(regex="(a"))
    assert err.value.param is None
