"""The vLLM 0.33 `vllm serve` flags speclab emits, and every other flag vLLM 0.33 knows.

The simulator accepts every flag in ``EMITTED`` with vLLM's meaning, warns on ``OTHER_KNOWN``
(not modelled) and rejects anything else with exit 2, as vLLM's parser does. The launcher's argv
builder emits only flags from ``EMITTED``. What vLLM's parser accepts is a generated data file,
``data/vllm_0_33_serve_flags.json`` (scripts/regen_vllm_flags.py writes it from vLLM 0.33.0's own
parser); ``EMITTED`` and ``REMOVED`` are speclab's choices and history, kept here by hand, and
tests/servers/test_vllm_parser.py checks all of it against that parser.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Final

DATA_FILE: Final = "data/vllm_0_33_serve_flags.json"
VLLM_VERSION: Final = "0.33.0"

# flag -> takes a value (True) or is a switch (False)
EMITTED: Final[dict[str, bool]] = {
    "--speculative-config": True,
    "--max-num-seqs": True,
    "--max-num-batched-tokens": True,
    "--enable-chunked-prefill": False,
    "--no-enable-chunked-prefill": False,
    "--async-scheduling": False,
    "--no-async-scheduling": False,
    "--scheduling-policy": True,
    "--gpu-memory-utilization": True,
    "--max-model-len": True,
    "--tensor-parallel-size": True,
    "--pipeline-parallel-size": True,
    "--distributed-executor-backend": True,
    "--host": True,
    "--port": True,
    "--seed": True,
    "--served-model-name": True,
    "--api-key": True,
    "--enable-per-request-metrics": False,
    "--per-request-spec-decode-metrics": True,
    "--enable-force-include-usage": False,
    "--stream-interval": True,
    "--revision": True,
    "--tokenizer": True,
}

# Removed before 0.33: vLLM's parser exits 2 on these.
REMOVED: Final[frozenset[str]] = frozenset(
    {
        "--speculative-model",
        "--num-speculative-tokens",
        "--speculative-draft-tensor-parallel-size",
        "--guided-decoding-backend",
        "--ngram-prompt-lookup-max",
        "--ngram-prompt-lookup-min",
        "--speculative-max-model-len",
        "--speculative-disable-by-batch-size",
    }
)


# What `extra_args` may not carry, with what to use instead: flags speclab emits from the lab's own keys
# (a second copy would win in vLLM's parser while the report showed the lab's value), flags it owns,
# and flags that contradict what it emits (vLLM refuses per-request metrics without logged stats, and
# the --spec-* shorthands next to --speculative-config).
_LAB_KEYS: Final = {
    "--speculative-config": "the [draft] table and the variants' keys", "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens", "--enable-chunked-prefill": "enable_chunked_prefill",
    "--no-enable-chunked-prefill": "enable_chunked_prefill", "--async-scheduling": "async_scheduling",
    "--no-async-scheduling": "async_scheduling", "--scheduling-policy": "scheduling_policy",
    "--gpu-memory-utilization": "gpu_memory_utilization", "--max-model-len": "max_model_len",
    "--tensor-parallel-size": "tensor_parallel_size", "--pipeline-parallel-size": "pipeline_parallel_size",
    "--distributed-executor-backend": "distributed_executor_backend", "--stream-interval": "stream_interval",
    "--seed": "seed", "--revision": "target.revision", "--tokenizer": "target.tokenizer",
}
NOT_EXTRA: Final[dict[str, str]] = {
    **{flag: f"set {key} in the lab instead" for flag, key in _LAB_KEYS.items()},
    **dict.fromkeys(("--host", "--port", "--served-model-name", "--enable-per-request-metrics",
                     "--per-request-spec-decode-metrics", "--enable-force-include-usage"),
                    "speclab sets it on every server it launches"),
    **dict.fromkeys(("--disable-log-stats", "--disable-per-request-metrics", "--no-enable-per-request-metrics"),
                    "speclab reads vLLM's per-request metrics, which this turns off or vLLM refuses beside them"),
    **dict.fromkeys(("--spec-method", "--spec-model", "--spec-tokens"),
                    "vLLM refuses it beside the --speculative-config speclab emits; use the lab's draft keys"),
}


def load_table(text: str) -> tuple[dict[str, bool], dict[str, str]]:
    """(flag -> takes a value, short alias -> long flag) from the data file's text; ValueError
    naming what is wrong where the file is not the table this module expects."""
    doc: Any = json.loads(text)
    if not isinstance(doc, dict) or doc.get("vllm") != VLLM_VERSION:
        raise ValueError(f"{DATA_FILE}: not vLLM {VLLM_VERSION}'s flag table")
    flags, aliases = doc.get("flags"), doc.get("aliases")
    if not isinstance(flags, dict) or not all(
            isinstance(k, str) and k.startswith("--") and isinstance(v, bool) for k, v in flags.items()):
        raise ValueError(f"{DATA_FILE}: 'flags' must map --long flags to true (takes a value) or false")
    if not isinstance(aliases, dict) or not all(
            isinstance(k, str) and k.startswith("-") and not k.startswith("--") and v in flags
            for k, v in aliases.items()):
        raise ValueError(f"{DATA_FILE}: 'aliases' must map -short forms to flags of the table")
    return flags, aliases


def _load() -> tuple[dict[str, bool], dict[str, str]]:
    flags, aliases = load_table(resources.files("speclab.model").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    for flag, takes_value in EMITTED.items():
        if flags.get(flag) is not takes_value:
            raise ValueError(f"{DATA_FILE}: emitted flag {flag} is {'missing' if flag not in flags else 'of another arity'}")
    if REMOVED & flags.keys():
        raise ValueError(f"{DATA_FILE}: removed flags present: {sorted(REMOVED & flags.keys())}")
    return flags, aliases


ACCEPTED, SHORT_ALIASES = _load()
# Known to vLLM 0.33 but not modelled by the simulator: accepted there with a warning. Every other
# option string vLLM 0.33.0's `vllm serve` parser accepts (hidden back-compat forms such as
# --no-enable-prefix-caching included).
OTHER_KNOWN: Final[dict[str, bool]] = {flag: takes for flag, takes in ACCEPTED.items() if flag not in EMITTED}
