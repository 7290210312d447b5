"""``--speculative-config`` keys beyond a fixed k, read with vLLM 0.33's rules and words."""

from __future__ import annotations

from typing import Any

import pytest

from speclab.model import speculative as sd
from speclab.sim.spec_args import SpecConfigError, not_modelled_keys, spec_config_from_json

DRAFT: dict[str, Any] = {"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 4}


def test_defaults_are_vllms() -> None:
    s = spec_config_from_json(DRAFT)
    assert (s.draft_sample_method, s.rejection_sample_method, s.per_batch_size) == ("greedy", "standard", None)
    assert (s.fly_entropy_threshold, s.fly_entropy_top_k, s.synthetic_acceptance_rates) == (0.3, 3, None)
    assert (s.suffix.max_tree_depth, s.suffix.max_cached_requests, s.suffix.max_spec_factor,
            s.suffix.min_token_prob) == (24, 10000, 1.0, 0.1)
    assert s.notes == [] and not_modelled_keys(s) == []


def test_synthetic_rates_resolve_like_vllm() -> None:
    s = spec_config_from_json({**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5})
    assert s.synthetic_acceptance_rates == [1.0, 0.5, 0.0, 0.0]
    s = spec_config_from_json({**DRAFT, "rejection_sample_method": "synthetic",
                               "synthetic_acceptance_rates": [0.9, 0.7, 0.5, 0.2]})
    assert s.synthetic_acceptance_rates == [0.9, 0.7, 0.5, 0.2]
    assert sd.conditional_rates([0.9, 0.45, 0.0]) == pytest.approx([0.9, 0.5, 0.0])


def test_fly_window_defaults_and_warns_lossy() -> None:
    s = spec_config_from_json({**DRAFT, "rejection_sample_method": "fly"})
    assert s.fly_window_size == 3
    assert any("FLy verification is a lossy" in n for n in s.notes)
    assert spec_config_from_json({**DRAFT, "num_speculative_tokens": 9, "rejection_sample_method": "fly"}
                                 ).fly_window_size == 6


@pytest.mark.parametrize(("extra", "needle"), [
    ({"rejection_sample_method": "synthetic"}, "requires exactly one of synthetic_acceptance_rates or"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0,
      "synthetic_acceptance_rates": [1, 1, 0, 0]}, "requires exactly one of"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.8]},
     "synthetic_acceptance_rates must have length 4"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.8, 0.1, 0.0]},
     "must be non-increasing"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1.5, 0.8, 0.1, 0.0]},
     r"entries must be in \[0, 1\]"),
    ({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 6.0},
     r"synthetic_acceptance_length must be in \[1, 5\], got 6.0"),
    ({"synthetic_acceptance_length": 2.0}, "are only valid with rejection_sample_method='synthetic'"),
    ({"rejection_sample_method": "fly", "num_speculative_tokens": 1}, "FLy requires num_speculative_tokens to be at"),
    ({"rejection_sample_method": "fly", "fly_window_size": 4}, "fly_window_size to be smaller than"),
    ({"rejection_sample_method": "strict"}, "Input should be 'standard', 'synthetic', 'block', 'fly'"),
    ({"draft_sample_method": "sampled"}, "Input should be 'greedy', 'probabilistic'"),
    ({"fly_entropy_top_k": 0}, "greater than or equal to 1"),
    ({"num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, "The first batch-size range must start at 1"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 3], [8, 16, 2]]}, "must be non-overlapping and sorted"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 3, 1]]}, "Tuple should have at most 3 items"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8]]}, r"num_speculative_tokens_per_batch_size.0.2\n  Field required"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, -1]]}, "values must be >= 0"),
    ({"num_speculative_tokens_per_batch_size": [[5, 1, 2]]}, "start must be <= end"),
    ({"use_heterogeneous_vocab": True, "draft_sample_method": "probabilistic"},
     "use_heterogeneous_vocab currently only supports greedy draft sampling"),
])
def test_vllms_refusals_in_its_words(extra: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecConfigError, match=needle):
        spec_config_from_json({**DRAFT, **extra})


def test_suffix_defaults_k_and_checks_its_bounds() -> None:
    s = spec_config_from_json({"method": "suffix"})
    assert s.num_speculative_tokens == 24 and "Defaulted num_speculative_tokens to 24 for suffix decoding." in s.notes
    s = spec_config_from_json({"method": "suffix", "suffix_decoding_max_tree_depth": 12})
    assert s.num_speculative_tokens == 12
    for key, value, needle in (("suffix_decoding_max_tree_depth", 0, "must be >= 1"),
                               ("suffix_decoding_max_cached_requests", -1, "must be >= 0"),
                               ("suffix_decoding_max_spec_factor", -0.5, "must be >= 0"),
                               ("suffix_decoding_min_token_prob", 1.5, r"must be in \[0, 1\]")):
        with pytest.raises(SpecConfigError, match=f"{key}={value} {needle}"):
            spec_config_from_json({"method": "suffix", key: value})


def test_schedule_is_normalized_and_vllms_v1_fallbacks_are_warned() -> None:
    s = spec_config_from_json({**DRAFT, "num_speculative_tokens_per_batch_size": [[17, 64, 2], [1, 16, 4]]})
    assert s.per_batch_size == [(1, 16, 4), (17, 64, 2)] and s.notes == []
    assert spec_config_from_json({**DRAFT, "num_speculative_tokens_per_batch_size": []}).per_batch_size is None
    clamp = spec_config_from_json({**DRAFT, "num_speculative_tokens_per_batch_size": [[1, 8, 6]]})
    assert any("vLLM clamps them to 4" in n for n in clamp.notes)
    suffix = spec_config_from_json({"method": "suffix", "num_speculative_tokens": 4,
                                    "num_speculative_tokens_per_batch_size": [[1, 8, 2]],
                                    "rejection_sample_method": "block"})
    assert suffix.per_batch_size is None and suffix.rejection_sample_method == "standard"
    assert any("Disabling num_speculative_tokens_per_batch_size" in n for n in suffix.notes)
    assert any("'block' is implemented by Model Runner V2 only" in n for n in suffix.notes)


def test_every_vllm_key_is_modelled_or_warned() -> None:
    every = {key: 1 for key in sd.SPEC_KEYS_NOT_MODELLED}
    s = spec_config_from_json({**DRAFT, **every})
    warned = not_modelled_keys(s)
    assert len(warned) == len(sd.SPEC_KEYS_NOT_MODELLED)
    assert all("is not modelled by the simulator; accepted and ignored" in w for w in warned)
    assert not sd.SPEC_KEYS_MODELLED & sd.SPEC_KEYS_NOT_MODELLED


def test_mtp_aliases_and_its_k_warning() -> None:
    s = spec_config_from_json({"method": "deepseek_mtp", "num_speculative_tokens": 2})
    assert s.method == "mtp"
    assert "method `deepseek_mtp` is deprecated and replaced with mtp." in s.notes
    assert any("multiple times of forward on same MTP layer" in n for n in s.notes)


def test_dense_schedule_is_vllms_lookup() -> None:
    dense = sd.dense_schedule([(1, 16, 3), (32, 128, 2), (256, 512, 0)], 300, 3)
    assert dense[1] == dense[16] == 3 and dense[17] == dense[31] == 3  # a gap carries the previous k
    assert dense[32] == dense[128] == 2 and dense[129] == dense[255] == 2
    assert dense[256] == dense[300] == 0 and len(dense) == 301
    assert sd.dense_schedule([(1, 4, 8)], 8, 5)[1:] == [5] * 8  # clamped to num_speculative_tokens, tail carried
