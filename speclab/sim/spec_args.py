"""``--speculative-config`` read the way vLLM 0.33's ``SpeculativeConfig`` reads it.

Every key vLLM 0.33 takes is either modelled (method, k, drafting and rejection methods, the
per-batch-size schedule, n-gram and suffix settings) or accepted with a start-up warning that the
simulator does not model it; an unknown key is refused as pydantic refuses it. Values are checked
with vLLM's rules and words (``speclab.model.speculative``). What vLLM itself changes at start-up
is mirrored with its warning: suffix decoding's default k, the schedule switched off where Model
Runner V1 cannot truncate drafts, and block verification falling back on V1.
"""

from __future__ import annotations

from typing import Any, Final

from speclab.model import speculative as sd

from .api import SpecConfig, SuffixSettings

SPEC_METHODS: Final = (
    "ngram", "ngram_gpu", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "mtp", "dflash", "dspark",
)
# vLLM 0.33 logs "method `X` is deprecated and replaced with mtp." for these and runs mtp.
MTP_ALIASES: Final = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
    "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
    "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp",
    "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
})
# Model Runner V1 (which suffix decoding and heterogeneous vocabularies force) truncates drafts per
# batch size only for these methods (``VllmConfig._maybe_disable_dynamic_sd_for_v1``).
V1_DYNAMIC_METHODS: Final = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})


class SpecConfigError(ValueError):
    """``--speculative-config`` that vLLM's SpeculativeConfig would reject."""


def _extra_input(key: str) -> SpecConfigError:
    return SpecConfigError(f"1 validation error for SpeculativeConfig\n{key}\n  Extra inputs are not permitted")


def _int(cfg: dict[str, Any], key: str, default: int, minimum: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecConfigError(f"1 validation error for SpeculativeConfig\n{key}\n  Input should be a valid integer "
                              f"[input_value={value!r}]")
    if minimum is not None and value < minimum:
        raise SpecConfigError(f"1 validation error for SpeculativeConfig\n{key}\n  Input should be greater than or "
                              f"equal to {minimum} [input_value={value!r}]")
    return value


def _float(cfg: dict[str, Any], key: str, default: float) -> float:
    value = cfg.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SpecConfigError(f"1 validation error for SpeculativeConfig\n{key}\n  Input should be a valid number "
                              f"[input_value={value!r}]")
    return float(value)


def _choice(cfg: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = cfg.get(key, default)
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise SpecConfigError(f"1 validation error for SpeculativeConfig\n{key}\n  Input should be {allowed} "
                              f"[input_value={value!r}]")
    return str(value)


def _method(cfg: dict[str, Any], notes: list[str]) -> str:
    method, model = cfg.get("method"), cfg.get("model")
    if method is None:
        if model is None:
            raise SpecConfigError("speculative_config: either `method` or `model` must be provided")
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method in MTP_ALIASES:
        notes.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    if method not in SPEC_METHODS:
        allowed = ", ".join(repr(m) for m in SPEC_METHODS)
        raise SpecConfigError(
            f"1 validation error for SpeculativeConfig\nmethod\n  Input should be {allowed} [input_value={method!r}]")
    return str(method)


def _lookup(cfg: dict[str, Any]) -> tuple[int | None, int | None]:
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if lo is None and hi is None:
        lo = hi = 5
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    for name, value in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if not isinstance(value, int) or value < 1:
            raise SpecConfigError(f"{name}={value!r} must be > 0")
    assert isinstance(lo, int) and isinstance(hi, int)
    if lo > hi:
        raise SpecConfigError(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    return lo, hi


def _suffix(cfg: dict[str, Any]) -> SuffixSettings:
    d = sd.SUFFIX_DEFAULTS
    settings = SuffixSettings(
        max_tree_depth=_int(cfg, "suffix_decoding_max_tree_depth", int(d["suffix_decoding_max_tree_depth"])),
        max_cached_requests=_int(cfg, "suffix_decoding_max_cached_requests",
                                 int(d["suffix_decoding_max_cached_requests"])),
        max_spec_factor=_float(cfg, "suffix_decoding_max_spec_factor", d["suffix_decoding_max_spec_factor"]),
        min_token_prob=_float(cfg, "suffix_decoding_min_token_prob", d["suffix_decoding_min_token_prob"]),
    )
    try:
        sd.check_suffix_settings(settings.max_tree_depth, settings.max_cached_requests, settings.max_spec_factor,
                                 settings.min_token_prob)
    except ValueError as exc:
        raise SpecConfigError(str(exc)) from None
    return settings


def _schedule(raw: Any) -> list[tuple[int, int, int]] | None:
    """pydantic's check of ``list[tuple[int, int, int]]`` first, then vLLM's scheduler-time rules.

    An empty list passes both and means no schedule (vLLM builds no lookup for it).
    """
    if raw is None or raw == []:
        return None
    field = "num_speculative_tokens_per_batch_size"
    head = f"1 validation error for SpeculativeConfig\n{field}"
    if not isinstance(raw, list):
        raise SpecConfigError(f"{head}\n  Input should be a valid list")
    for i, entry in enumerate(raw):
        if not isinstance(entry, list):
            raise SpecConfigError(f"{head}.{i}\n  Input should be a valid tuple")
        if len(entry) > 3:
            raise SpecConfigError(f"{head}.{i}\n  Tuple should have at most 3 items after validation, not {len(entry)}")
        if len(entry) < 3:
            raise SpecConfigError(f"{head}.{i}.{len(entry)}\n  Field required")
        for j, value in enumerate(entry):
            if not isinstance(value, int) or isinstance(value, bool):
                raise SpecConfigError(f"{head}.{i}.{j}\n  Input should be a valid integer")
    return sd.normalize_schedule(raw)


def spec_config_from_json(raw: Any) -> SpecConfig:
    """Validate a ``--speculative-config`` mapping like vLLM 0.33's SpeculativeConfig."""
    if not isinstance(raw, dict):
        raise SpecConfigError("speculative_config must be a JSON object")
    cfg = {str(k).replace("-", "_"): v for k, v in raw.items()}
    if "tensor_parallel_size" in cfg:
        raise SpecConfigError(
            "tensor_parallel_size is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead."
        )
    known = sd.SPEC_KEYS_MODELLED | sd.SPEC_KEYS_NOT_MODELLED
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise _extra_input(unknown[0])
    notes: list[str] = []
    method = _method(cfg, notes)
    model = cfg.get("model")
    suffix = _suffix(cfg)
    k = cfg.get("num_speculative_tokens")
    if k is None and method == "suffix":
        k = suffix.max_tree_depth
        notes.append(f"Defaulted num_speculative_tokens to {k} for suffix decoding.")
    if k is None:
        raise SpecConfigError(
            "num_speculative_tokens must be provided with speculative model unless the draft "
            "model config contains an n_predict parameter."
        )
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise SpecConfigError(f"Expected num_speculative_tokens to be greater than zero ({k!r}).")
    if method in ("draft_model", "eagle", "eagle3") and not model:
        raise SpecConfigError("num_speculative_tokens was provided but without speculative model.")
    lo = hi = None
    if method in ("ngram", "ngram_gpu"):
        lo, hi = _lookup(cfg)
        model = None
    draft_sampling = _choice(cfg, "draft_sample_method", sd.DRAFT_SAMPLE_METHODS, "greedy")
    rejection = _choice(cfg, "rejection_sample_method", sd.REJECTION_SAMPLE_METHODS, "standard")
    hetero = bool(cfg.get("use_heterogeneous_vocab", False))
    if hetero and method != "draft_model":
        raise SpecConfigError("use_heterogeneous_vocab only works with method='draft_model'")
    if hetero and draft_sampling != "greedy":
        raise SpecConfigError(
            "use_heterogeneous_vocab currently only supports greedy draft sampling. Set "
            "draft_sample_method='greedy' (the default) or omit it.")
    fly_window = cfg.get("fly_window_size")
    if fly_window is not None:
        fly_window = _int(cfg, "fly_window_size", 1, minimum=1)
    threshold = _float(cfg, "fly_entropy_threshold", sd.FLY_DEFAULT_ENTROPY_THRESHOLD)
    if threshold < 0:
        raise SpecConfigError("1 validation error for SpeculativeConfig\nfly_entropy_threshold\n  Input should be "
                              f"greater than or equal to 0 [input_value={threshold!r}]")
    top_k = _int(cfg, "fly_entropy_top_k", sd.FLY_DEFAULT_ENTROPY_TOP_K, minimum=1)
    rates = cfg.get("synthetic_acceptance_rates")
    length = cfg.get("synthetic_acceptance_length")
    try:
        fly_window = sd.check_rejection_settings(rejection, k, rates=rates, length=length, fly_window_size=fly_window)
        resolved = sd.resolve_synthetic_rates(k, rates, length) if rejection == "synthetic" else None
        per_batch = _schedule(cfg.get("num_speculative_tokens_per_batch_size"))
    except (ValueError, TypeError) as exc:
        raise SpecConfigError(str(exc)) from None
    if rejection == "fly":
        notes.append("FLy verification is a lossy speculative decoding method and may degrade model outputs.")
    v1_runner = method in ("suffix", "custom_class") or hetero
    if per_batch is not None and v1_runner and method not in V1_DYNAMIC_METHODS:
        notes.append(f"Dynamic speculative decoding is not supported with the '{method}' speculative method on "
                     "Model Runner V1. Disabling num_speculative_tokens_per_batch_size and falling back to static "
                     f"num_speculative_tokens={k}.")
        per_batch = None
    if per_batch is not None and sd.schedule_over_k(per_batch, k):
        notes.append(f"num_speculative_tokens_per_batch_size entries {sd.schedule_over_k(per_batch, k)} exceed "
                     f"num_speculative_tokens={k}; vLLM clamps them to {k}")
    if rejection == "block" and v1_runner:
        notes.append(f"rejection_sample_method 'block' is implemented by Model Runner V2 only; {method!r} runs on "
                     "Model Runner V1, which verifies token by token ('standard')")
        rejection = "standard"
    if method == "mtp" and k > 1:
        notes.append("Enabling num_speculative_tokens > 1 will run multiple times of forward on same MTP layer"
                     ",which may result in lower acceptance rate")
    extra = {key: v for key, v in cfg.items() if key in sd.SPEC_KEYS_NOT_MODELLED}
    return SpecConfig(
        method=method, num_speculative_tokens=k, model=model, prompt_lookup_min=lo, prompt_lookup_max=hi,
        extra=extra, draft_sample_method=draft_sampling, rejection_sample_method=rejection,
        synthetic_acceptance_rates=resolved, fly_window_size=fly_window, fly_entropy_threshold=threshold,
        fly_entropy_top_k=top_k, per_batch_size=per_batch, suffix=suffix, use_heterogeneous_vocab=hetero,
        notes=notes,
    )


def not_modelled_keys(spec: SpecConfig) -> list[str]:
    """Start-up warnings, one per ``--speculative-config`` key the simulator accepts but does not model."""
    return [f"--speculative-config key {key!r} is not modelled by the simulator; accepted and ignored"
            for key in sorted(spec.extra)]
