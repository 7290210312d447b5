"""A lab variant's k schedule, drafting and rejection methods, and the suffix settings: checked on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclab.model import speculative as sd
from speclab.model.errors import InputError
from speclab.model.lab import load_lab
from speclab.servers.argv import build_argv

GOOD = """
name = "x"
[target]
model = "org/t"
revision = "r"
sim_model = "sim-8b"
[draft]
method = "draft_model"
model = "org/d"
revision = "r"
sim_model = "sim-1b"
[[variants]]
name = "baseline"
speculative = false
[[variants]]
name = "k4"
num_speculative_tokens = 4
"""


def error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "lab.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_lab(path)
    return str(info.value)


def with_k4(extra: str, draft: str | None = None) -> str:
    text = GOOD.replace("num_speculative_tokens = 4", f"num_speculative_tokens = 4\n{extra}")
    if draft is not None:
        text = text.replace('method = "draft_model"\nmodel = "org/d"\nrevision = "r"\nsim_model = "sim-1b"', draft)
    return text


@pytest.mark.parametrize(("extra", "draft", "expected"), [
    ("num_speculative_tokens_per_batch_size = [[1, 16, 6]]", None,
     "variants[1].num_speculative_tokens_per_batch_size: [1, 16, 6] asks for k=6, over num_speculative_tokens (4); "
     "vLLM 0.33 would quietly clamp it to 4"),
    ("num_speculative_tokens_per_batch_size = [[2, 16, 3]]", None,
     "variants[1].num_speculative_tokens_per_batch_size: The first batch-size range must start at 1"),
    ("num_speculative_tokens_per_batch_size = [[1, 16, 3], [10, 20, 1]]", None,
     "Batch-size ranges must be non-overlapping and sorted."),
    ('rejection_sample_method = "synthetic"', None,
     "variants[1].rejection_sample_method: rejection_sample_method='synthetic' requires exactly one of"),
    ('rejection_sample_method = "synthetic"\nsynthetic_acceptance_length = 7.0', None,
     "synthetic_acceptance_length must be in [1, 5], got 7.0"),
    ("synthetic_acceptance_length = 2.0", None,
     "variants[1].synthetic_acceptance_length: synthetic_acceptance_rates / synthetic_acceptance_length are only valid"),
    ('rejection_sample_method = "fly"\nfly_window_size = 4', None,
     "variants[1].rejection_sample_method: FLy requires fly_window_size to be smaller than num_speculative_tokens."),
    ("fly_entropy_threshold = 0.5", None, "variants[1].fly_entropy_threshold: only rejection_sample_method 'fly' uses it"),
    ('rejection_sample_method = "strict"', None, "variants[1].rejection_sample_method: expected one of 'standard'"),
    ('draft_sample_method = "probabilistic"', 'method = "draft_model"\nmodel = "org/d"\nrevision = "r"\n'
     'sim_model = "sim-1b"\nuse_heterogeneous_vocab = true',
     "use_heterogeneous_vocab currently only supports greedy draft sampling"),
    ("num_speculative_tokens_per_batch_size = [[1, 16, 3]]", 'method = "suffix"',
     "vLLM 0.33 disables it with method 'suffix'"),
    ('rejection_sample_method = "block"', 'method = "suffix"', "'block' runs on Model Runner V2 only"),
    ("", 'method = "ngram"\nsuffix_decoding_max_tree_depth = 12',
     "draft.suffix_decoding_max_tree_depth: only method 'suffix' uses it"),
    ("", 'method = "suffix"\nsuffix_decoding_min_token_prob = 1.5',
     "draft.suffix_decoding_min_token_prob: expected a number at least 0 and at most 1, got 1.5"),
    ("", 'method = "eagle3"\nmodel = "org/head"\nsim_model = "sim-1b"',
     "draft.sim_model: method 'eagle3' drafts with a head on the target's own state"),
])
def test_refusals_name_the_field(tmp_path: Path, extra: str, draft: str | None, expected: str) -> None:
    message = error_of(tmp_path, with_k4(extra, draft))
    assert expected in message, message


def test_a_baseline_carries_none_of_them(tmp_path: Path) -> None:
    text = GOOD.replace("speculative = false", 'speculative = false\nrejection_sample_method = "block"')
    assert "variants[0].rejection_sample_method: variant 'baseline' is the baseline" in error_of(tmp_path, text)


def test_settings_reach_the_speculative_config_and_lossy_is_known(tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(with_k4('num_speculative_tokens_per_batch_size = [[17, 64, 2], [1, 16, 4]]\n'
                            'rejection_sample_method = "fly"\ndraft_sample_method = "probabilistic"'))
    lab = load_lab(path)
    for engine in ("vllm", "sim"):
        argv = build_argv(lab, "k4", engine=engine, port=1)
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert spec["num_speculative_tokens_per_batch_size"] == [[1, 16, 4], [17, 64, 2]]
        assert (spec["rejection_sample_method"], spec["draft_sample_method"]) == ("fly", "probabilistic")
    variant = lab.variant("k4")
    assert variant.lossy_note is not None and "lossy" in variant.lossy_note
    assert lab.variant("baseline").lossy_note is None
    changed = lab.with_changes("k4", {"rejection_sample_method": "block", "num_speculative_tokens_per_batch_size": None})
    assert changed.variant("k4").lossy_note is None
    assert "num_speculative_tokens_per_batch_size" not in changed.effective("k4").spec_options
    with pytest.raises(ValueError, match="asks for k=6"):
        lab.with_changes("k4", {"num_speculative_tokens_per_batch_size": [[1, 8, 6]]})


@pytest.mark.parametrize("method", [*sd.REJECTION_SAMPLE_METHODS, None])
def test_exactly_the_lossy_methods_carry_a_note(method: str | None) -> None:
    note = sd.lossy_note(method)
    if method in sd.LOSSY_REJECTION_METHODS:
        assert note is not None and note.startswith(f"rejection_sample_method '{method}' is lossy: ")
    else:
        assert note is None
