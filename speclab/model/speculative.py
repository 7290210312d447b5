"""vLLM 0.33's speculative-decoding knobs beyond a fixed k, with its own rules and words.

Both the lab file and the simulator validate ``num_speculative_tokens_per_batch_size``,
``draft_sample_method``, ``rejection_sample_method`` (and its synthetic and FLy parameters) and
the suffix-decoding settings here, so a lab is refused for exactly what vLLM 0.33 would refuse,
in its words (``config/speculative.py`` ``_verify_args``, ``v1/spec_decode/dynamic/utils.py``),
and the simulator picks k per step from the same dense lookup vLLM's scheduler builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

RejectionSampleMethod = Literal["standard", "synthetic", "block", "fly"]
DraftSampleMethod = Literal["greedy", "probabilistic"]
REJECTION_SAMPLE_METHODS: Final = ("standard", "synthetic", "block", "fly")
DRAFT_SAMPLE_METHODS: Final = ("greedy", "probabilistic")
# Methods whose output is not the target's: synthetic accepts at configured rates whatever the
# target says (a performance stand-in), FLy accepts some rejected drafts on purpose.
LOSSY_REJECTION_METHODS: Final = frozenset({"synthetic", "fly"})
FLY_DEFAULT_ENTROPY_THRESHOLD: Final = 0.3
FLY_DEFAULT_ENTROPY_TOP_K: Final = 3
SUFFIX_DEFAULT_TREE_DEPTH: Final = 24
SUFFIX_DEFAULTS: Final = {
    "suffix_decoding_max_tree_depth": SUFFIX_DEFAULT_TREE_DEPTH,
    "suffix_decoding_max_cached_requests": 10000,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}

# vLLM 0.33's V1 runner (config/vllm.py): the methods whose proposer honours a per-batch-size k;
# for any other it drops num_speculative_tokens_per_batch_size and runs the static k.
DYNAMIC_K_METHODS: Final = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})

Schedule = list[tuple[int, int, int]]


def normalize_schedule(raw: object) -> Schedule:
    """``num_speculative_tokens_per_batch_size`` as vLLM 0.33 validates it: inclusive, sorted, from 1."""
    if raw is None:
        raise ValueError("num_speculative_tokens_per_batch_size is required for dynamic speculative decoding.")
    if not isinstance(raw, list | tuple):
        raise ValueError("num_speculative_tokens_per_batch_size must be a non-empty list of "
                         "(range_start, range_end, num_speculative_tokens) entries.")
    if not raw:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty.")
    parsed = sorted((schedule_entry(entry) for entry in raw), key=lambda item: item[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if parsed[0][0] != 1:
        raise ValueError("The first batch-size range must start at 1 so every runtime batch size has a defined schedule.")
    return parsed


def schedule_entry(entry: object) -> tuple[int, int, int]:
    """One ``(range_start, range_end, num_speculative_tokens)`` entry, checked as vLLM 0.33 checks it."""
    if not isinstance(entry, list | tuple) or len(entry) != 3:
        raise ValueError("Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                         "(range_start, range_end, num_speculative_tokens).")
    try:
        start, end, k = (int(x) for x in entry)
    except (TypeError, ValueError):
        raise ValueError(f"num_speculative_tokens_per_batch_size entry {list(entry)!r} must hold integers") from None
    if start <= 0 or end <= 0:
        raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
    if start > end:
        raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
    if k < 0:
        raise ValueError("num_speculative_tokens_per_batch_size values must be >= 0.")
    return start, end, k


def dense_schedule(schedule: Sequence[Sequence[int]], max_batch_size: int, num_speculative_tokens: int) -> list[int]:
    """vLLM's batch size -> k lookup (index 0 unused): gaps and the tail carry the previous k forward,
    and every k is clamped to ``num_speculative_tokens``."""
    if max_batch_size <= 0:
        raise ValueError("vllm_max_batch_size must be > 0.")
    if num_speculative_tokens <= 0:
        raise ValueError("vllm_num_speculative_tokens must be > 0.")
    dense = [0] * (max_batch_size + 1)
    nxt = 1
    last: int | None = None
    for start, end, k in normalize_schedule(list(schedule)):
        if start > nxt and last is not None:
            for b in range(nxt, min(start, max_batch_size + 1)):
                dense[b] = min(num_speculative_tokens, last)
        for b in range(max(start, nxt), min(end, max_batch_size) + 1):
            dense[b] = min(num_speculative_tokens, k)
        nxt = max(nxt, end + 1)
        last = k
        if nxt > max_batch_size:
            break
    assert last is not None
    for b in range(nxt, max_batch_size + 1):
        dense[b] = min(num_speculative_tokens, last)
    return dense


def schedule_over_k(schedule: Schedule, num_speculative_tokens: int) -> list[tuple[int, int, int]]:
    """Entries whose k exceeds ``num_speculative_tokens`` (vLLM clamps them without a word)."""
    return [entry for entry in schedule if entry[2] > num_speculative_tokens]


def acceptance_length_to_rates(length: float, n: int) -> list[float]:
    """A mean acceptance length as unconditional per-position rates (vLLM's minimum-variance schedule)."""
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def resolve_synthetic_rates(n: int, rates: Sequence[float] | None, length: float | None) -> list[float]:
    """Unconditional per-position rates from exactly one of ``rates`` and ``length``, checked as vLLM does."""
    if (rates is None) == (length is None):
        raise ValueError("rejection_sample_method='synthetic' requires exactly one of "
                         "synthetic_acceptance_rates or synthetic_acceptance_length.")
    if rates is not None:
        values = [float(r) for r in rates]
        if len(values) != n:
            raise ValueError(f"synthetic_acceptance_rates must have length {n}, got {values}.")
        if not all(0.0 <= r <= 1.0 for r in values):
            raise ValueError(f"synthetic_acceptance_rates entries must be in [0, 1], got {values}.")
        if any(values[i] > values[i - 1] for i in range(1, n)):
            raise ValueError(f"synthetic_acceptance_rates must be non-increasing, got {values}.")
        return values
    assert length is not None
    if not 1.0 <= length <= float(n + 1):
        raise ValueError(f"synthetic_acceptance_length must be in [1, {n + 1}], got {length}.")
    return acceptance_length_to_rates(length, n)


def conditional_rates(rates: Sequence[float]) -> list[float]:
    """P(position i accepted | positions before it accepted): c_i = a_i / a_(i-1)."""
    return [p / q if q > 0.0 else 0.0 for p, q in zip(rates, [1.0, *rates[:-1]], strict=True)]


def check_rejection_settings(method: str, k: int, *, rates: Sequence[float] | None = None,
                             length: float | None = None, fly_window_size: int | None = None) -> int | None:
    """vLLM 0.33's rules for the rejection method's parameters; returns FLy's window (None otherwise)."""
    if method == "synthetic":
        resolve_synthetic_rates(k, rates, length)
    elif rates is not None or length is not None:
        raise ValueError("synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                         "rejection_sample_method='synthetic'.")
    if method != "fly":
        return None
    if k < 2:
        raise ValueError("FLy requires num_speculative_tokens to be at least 2.")
    if fly_window_size is None:
        return min(6, k - 1)
    if fly_window_size >= k:
        raise ValueError("FLy requires fly_window_size to be smaller than num_speculative_tokens.")
    return fly_window_size


def check_draft_length(k: int, method: str, *, n_predict: int | None = None,
                       suffix_max_tree_depth: int = SUFFIX_DEFAULT_TREE_DEPTH,
                       rejection_sample_method: str = "standard", fly_window_size: int | None = None) -> None:
    """ValueError saying why ``method`` cannot run ``k`` >= 1 drafts a step: vLLM 0.33's refusals in
    its words (MTP's divisibility by ``n_predict``, FLy's minimum and window), and suffix decoding's
    tree depth, which bounds what it can ever draft."""
    if method == "mtp" and n_predict and k > n_predict and k % n_predict:
        raise ValueError(f"vLLM 0.33 refuses it for mtp: num_speculative_tokens:{k} must be divisible by "
                         f"n_predict={n_predict}")
    if method == "suffix" and k > suffix_max_tree_depth:
        raise ValueError(f"deeper than suffix decoding can draft (suffix_decoding_max_tree_depth="
                         f"{suffix_max_tree_depth} bounds match plus drafts)")
    if rejection_sample_method == "fly":
        try:
            check_rejection_settings("fly", k, fly_window_size=fly_window_size)
        except ValueError as exc:
            raise ValueError(f"vLLM 0.33 refuses it with rejection_sample_method 'fly': {exc}") from None


def check_suffix_settings(depth: int, cached: int, factor: float, min_prob: float) -> None:
    """vLLM 0.33's ``_validate_suffix_decoding`` bounds, in its words."""
    if depth < 1:
        raise ValueError(f"suffix_decoding_max_tree_depth={depth} must be >= 1")
    if cached < 0:
        raise ValueError(f"suffix_decoding_max_cached_requests={cached} must be >= 0")
    if factor < 0:
        raise ValueError(f"suffix_decoding_max_spec_factor={factor} must be >= 0")
    if not 0 <= min_prob <= 1:
        raise ValueError(f"suffix_decoding_min_token_prob={min_prob} must be in [0, 1]")


_LOSSY_WHY: Final = {
    "fly": "FLy accepts some drafts the target rejects (entropy-gated), so output may differ from the baseline",
    "synthetic": ("drafts are accepted at configured rates whatever the target says (a performance stand-in), "
                  "so output differs from the baseline"),
}


def lossy_note(method: str | None) -> str | None:
    """Why a rejection method's output is not the target's, or None for the lossless ones."""
    if method is None or method not in LOSSY_REJECTION_METHODS:
        return None
    return f"rejection_sample_method '{method}' is lossy: {_LOSSY_WHY[method]}"


# Every key vLLM 0.33's SpeculativeConfig takes from a user (checked against its fields by
# tests/servers/test_vllm_parser.py), split by what the simulator does with it.
SPEC_KEYS_MODELLED: Final = frozenset({
    "method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
    "use_heterogeneous_vocab", "rejection_sample_method", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "draft_sample_method", "num_speculative_tokens_per_batch_size",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k", *SUFFIX_DEFAULTS,
})
SPEC_KEYS_NOT_MODELLED: Final = frozenset({
    "enforce_eager", "draft_tensor_parallel_size", "quantization", "moe_backend", "attention_backend",
    "kv_cache_dtype", "max_model_len", "revision", "code_revision", "index_share_for_mtp_iteration",
    "disable_padded_drafter_batch", "disable_eagle_block_drop", "disable_lookahead_block_hashes",
    "draft_lm_head_quantization", "use_local_argmax_reduction", "parallel_drafting", "draft_load_config",
    "enable_adaptive_verification", "dspark_draft_topk", "xpress_topc",
})
# Filled in by vLLM itself; a user passing one gets what vLLM does with it (tensor_parallel_size: an error).
SPEC_KEYS_INTERNAL: Final = frozenset({
    "tensor_parallel_size", "target_model_config", "target_parallel_config", "draft_model_config",
    "draft_parallel_config",
})
