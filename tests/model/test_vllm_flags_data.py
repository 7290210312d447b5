"""The shipped vLLM flag table (speclab/model/data/) is what its loader expects, and the loader
refuses a table that is not, naming the fault (the parser check itself is tests/servers/test_vllm_parser.py)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from speclab.model import vllm_flags as vf


def _doc() -> dict[str, object]:
    text = resources.files("speclab.model").joinpath(vf.DATA_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text))


def test_the_data_file_ships_with_the_package_and_loads() -> None:
    doc = _doc()
    assert doc["vllm"] == vf.VLLM_VERSION
    flags, aliases = vf.load_table(json.dumps(doc))
    assert flags == vf.ACCEPTED and aliases == vf.SHORT_ALIASES
    assert len(flags) > 400 and len(aliases) > 10  # the whole `vllm serve` parser, not a sample


def test_emitted_flags_are_in_the_table_with_their_arity_and_removed_ones_are_not() -> None:
    for flag, takes_value in vf.EMITTED.items():
        assert vf.ACCEPTED[flag] is takes_value, flag
    assert not vf.REMOVED & vf.ACCEPTED.keys()
    assert set(vf.OTHER_KNOWN) == set(vf.ACCEPTED) - set(vf.EMITTED)
    assert vf.SHORT_ALIASES["-tp"] == "--tensor-parallel-size" and vf.SHORT_ALIASES["-sc"] == "--speculative-config"
    assert "--help" not in vf.ACCEPTED and "-h" not in vf.SHORT_ALIASES


def test_the_file_is_sorted_one_entry_a_line_as_the_generator_writes_it() -> None:
    doc = _doc()
    for key in ("flags", "aliases"):
        table = doc[key]
        assert isinstance(table, dict)
        assert list(table) == sorted(table), key
    text = resources.files("speclab.model").joinpath(vf.DATA_FILE).read_text(encoding="utf-8")
    assert text == json.dumps(doc, indent=1) + "\n"


@pytest.mark.parametrize(("change", "message"), [
    ({"vllm": "0.32.0"}, "not vLLM 0.33.0's flag table"),
    ({"flags": {"max-num-seqs": True}}, "'flags' must map --long flags"),
    ({"flags": {"--max-num-seqs": "yes"}}, "'flags' must map --long flags"),
    ({"aliases": {"-q": "--no-such-flag"}}, "'aliases' must map -short forms to flags of the table"),
    ({"aliases": {"--tp": "--tensor-parallel-size"}}, "'aliases' must map -short forms"),
])
def test_a_table_of_another_shape_is_refused_naming_the_fault(change: dict[str, object], message: str) -> None:
    doc = {**_doc(), **change}
    with pytest.raises(ValueError, match=message):
        vf.load_table(json.dumps(doc))
