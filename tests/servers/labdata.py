"""Lab dictionaries for the servers tests: one per draft method, plus settings that vary flags."""

from __future__ import annotations

import copy
import glob
from pathlib import Path
from typing import Any

from speclab.model.lab import Lab, load_lab
from speclab.model.paths import bundled_dir

BASE: dict[str, Any] = {
    "name": "t",
    "target": {"model": "org/target-8b", "revision": "r1", "sim_model": "sim-8b"},
    "draft": {"method": "draft_model", "model": "org/draft-1b", "revision": "d1", "sim_model": "sim-1b"},
    "pair": {"target_model": "org/target-8b", "target_revision": "r1", "draft_model": "org/draft-1b", "draft_revision": "d1"},
    "server": {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
    "variants": [{"name": "baseline", "speculative": False}, {"name": "k3", "num_speculative_tokens": 3}],
}

DRAFTS: dict[str, dict[str, Any]] = {
    "draft_model": BASE["draft"],
    "eagle": {"method": "eagle", "model": "org/eagle-head", "revision": "e1"},
    "eagle3": {"method": "eagle3", "model": "org/eagle3-head", "revision": "e3"},
    "ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    "mtp": {"method": "mtp"},
    "suffix": {"method": "suffix"},
}


def lab_dict(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        data[key] = value
    return data


def make_lab(**changes: Any) -> Lab:
    return Lab.model_validate(lab_dict(**changes))


def method_lab(method: str, **server: Any) -> Lab:
    data = lab_dict(draft=copy.deepcopy(DRAFTS[method]))
    if method != "draft_model":
        data.pop("pair")
    data["server"].update(server)
    return Lab.model_validate(data)


def bundled_lab_paths() -> list[Path]:
    root = bundled_dir("labs")
    return [Path(p) for p in sorted(glob.glob(str(root / "**" / "*.toml"), recursive=True))]


def bundled_labs() -> list[Lab]:
    return [load_lab(p) for p in bundled_lab_paths()]


def flag_variety_labs() -> list[Lab]:
    """Labs that between them switch on every optional flag the builder can emit."""
    return [
        method_lab("draft_model", enable_chunked_prefill=False, async_scheduling=True, scheduling_policy="priority",
                   stream_interval=4, gpu_memory_utilization=0.8, max_model_len=2048, tensor_parallel_size=2,
                   extra_args=["--enable-prefix-caching"]),
        method_lab("eagle3", enable_chunked_prefill=True, async_scheduling=False, topology="shared"),
        method_lab("ngram", async_scheduling=False),
        # multi-node: tensor x pipeline parallel over a Ray cluster
        method_lab("draft_model", tensor_parallel_size=2, pipeline_parallel_size=2, distributed_executor_backend="ray"),
        method_lab("eagle3", pipeline_parallel_size=2, distributed_executor_backend="mp"),
        make_lab(target={"model": "org/target-8b", "revision": "r1", "sim_model": "sim-8b", "tokenizer": "/tmp/tok"}),
    ]


def spec_variety_labs() -> list[Lab]:
    """Labs that between them set every vLLM 0.33 speculative knob beyond k the builder can emit."""
    variants: list[dict[str, Any]] = [
        {"name": "baseline", "speculative": False},
        {"name": "sched", "num_speculative_tokens": 4,
         "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 64, 2], [65, 1024, 0]]},
        {"name": "block", "num_speculative_tokens": 3, "rejection_sample_method": "block",
         "draft_sample_method": "probabilistic"},
        {"name": "synth", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
         "synthetic_acceptance_length": 2.5},
        {"name": "synthr", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
         "synthetic_acceptance_rates": [0.9, 0.6, 0.3]},
        {"name": "fly", "num_speculative_tokens": 5, "rejection_sample_method": "fly", "fly_window_size": 2,
         "fly_entropy_threshold": 0.5, "fly_entropy_top_k": 4},
        {"name": "greedy", "num_speculative_tokens": 2, "draft_sample_method": "greedy",
         "rejection_sample_method": "standard"},
    ]
    suffix = lab_dict(draft={"method": "suffix", "suffix_decoding_max_tree_depth": 16,
                             "suffix_decoding_max_cached_requests": 100, "suffix_decoding_max_spec_factor": 2.0,
                             "suffix_decoding_min_token_prob": 0.2})
    suffix.pop("pair")
    heads = lab_dict(draft=copy.deepcopy(DRAFTS["eagle3"]), variants=[
        {"name": "baseline", "speculative": False},
        {"name": "k3", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 512, 1]],
         "draft_sample_method": "probabilistic", "rejection_sample_method": "fly"}])
    heads.pop("pair")
    return [Lab.model_validate(lab_dict(name="knobs", variants=variants)), Lab.model_validate(suffix),
            Lab.model_validate(heads)]
