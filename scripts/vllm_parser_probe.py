"""Runs inside the cached vLLM 0.33 venv (scripts/vllm_parser_env.sh), not under speclab's venv.

``probe.py parse`` reads a JSON list of argv lists (each without the leading ``vllm serve``) on
stdin and prints, per argv, whether vLLM's own `vllm serve` parser accepts it, the error text if
not, and the parsed values speclab cares about. ``probe.py flags`` prints every option the parser
knows, with whether it takes a value. ``probe.py spec`` reads ``[{"config": {...}, "max_num_seqs": N}]``
and runs each speculative config through vLLM's own ``SpeculativeConfig`` validators and the
scheduler's dense k lookup; ``probe.py spec_fields`` lists SpeculativeConfig's fields. One process
pays the ~7 s import once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

KEYS = (
    "model_tag", "model", "revision", "tokenizer", "served_model_name", "host", "port", "seed",
    "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "enable_chunked_prefill", "async_scheduling", "scheduling_policy",
    "stream_interval", "speculative_config", "enable_per_request_metrics",
    "per_request_spec_decode_metrics", "enable_force_include_usage",
)


def parser() -> argparse.ArgumentParser:
    return make_arg_parser(FlexibleArgumentParser())


def parse(argvs: list[list[str]]) -> list[dict]:
    out = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser().parse_args(argv)
        except SystemExit as exc:
            out.append({"ok": False, "code": exc.code, "error": err.getvalue().strip().splitlines()[-1:]})
            continue
        except Exception as exc:  # a ValueError from vLLM's own checks
            out.append({"ok": False, "code": None, "error": [f"{type(exc).__name__}: {exc}"]})
            continue
        values = {k: getattr(ns, k) for k in KEYS if hasattr(ns, k)}
        out.append({"ok": True, "values": json.loads(json.dumps(values, default=str))})
    return out


def flags() -> dict[str, dict[str, object]]:
    """{"flags": {--long: takes_value}, "aliases": {-short: --long}}.

    ``_option_string_actions`` also holds the hidden back-compat forms (``--no-enable-x``).
    """
    actions = parser()._option_string_actions
    table = {opt: action.nargs != 0 for opt, action in actions.items() if opt.startswith("--")}
    aliases = {}
    for opt, action in actions.items():
        if not opt.startswith("--"):
            longs = [o for o in action.option_strings if o.startswith("--")]
            if longs:
                aliases[opt] = longs[0]
    return {"flags": table, "aliases": aliases}


# Keys that need the draft checkpoint loaded (or method draft_model) to be checked; left out of the
# method-independent check, which stands prompt lookup in for the drafter.
_DRAFT_ONLY = {"model", "method", "revision", "code_revision", "quantization", "use_heterogeneous_vocab",
               "draft_tensor_parallel_size", "max_model_len", "prompt_lookup_min", "prompt_lookup_max"}


def spec(items: list[dict]) -> list[dict]:
    """vLLM's verdict on each config's method-independent settings, and what it resolves them to."""
    import vllm.config.speculative as spec_module
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    spec_module.has_arctic_inference = lambda: True  # only the suffix bounds are checked, not the library
    fields = set(SpeculativeConfig.__pydantic_fields__)
    out = []
    for item in items:
        cfg = item["config"]
        unknown = sorted(set(cfg) - fields)
        if unknown:
            out.append({"ok": False, "error": f"not SpeculativeConfig fields: {unknown}"})
            continue
        kept = {k: v for k, v in cfg.items() if k not in _DRAFT_ONLY}
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                sc = SpeculativeConfig(method="ngram", **kept)
                if cfg.get("method") == "suffix":
                    sc._validate_suffix_decoding()
                dense = None
                if sc.num_speculative_tokens_per_batch_size:
                    dense = build_dynamic_sd_schedule_lookup(sc.num_speculative_tokens_per_batch_size,
                                                             vllm_max_batch_size=item.get("max_num_seqs") or 256,
                                                             vllm_num_speculative_tokens=sc.num_speculative_tokens)
        except Exception as exc:  # vLLM's own refusal, reported
            out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append({"ok": True, "synthetic_acceptance_rates": sc.synthetic_acceptance_rates,
                    "fly_window_size": sc.fly_window_size, "dense": dense})
    return out


if __name__ == "__main__":
    if sys.argv[1] == "parse":
        print(json.dumps(parse(json.load(sys.stdin))))
    elif sys.argv[1] == "spec":
        print(json.dumps(spec(json.load(sys.stdin))))
    elif sys.argv[1] == "spec_fields":
        from vllm.config.speculative import SpeculativeConfig

        print(json.dumps(sorted(SpeculativeConfig.__pydantic_fields__)))
    else:
        print(json.dumps(flags(), sort_keys=True))
