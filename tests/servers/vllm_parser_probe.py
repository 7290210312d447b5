"""Runs inside the cached vLLM 0.33 venv (scripts/vllm_parser_env.sh), not under speclab's venv.

``probe.py parse`` reads a JSON list of argv lists (each without the leading ``vllm serve``) on
stdin and prints, per argv, whether vLLM's own `vllm serve` parser accepts it, the error text if
not, and the parsed values speclab cares about. ``probe.py flags`` prints every option the parser
knows, with whether it takes a value. One process pays the ~7 s import once.
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
    "tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
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


if __name__ == "__main__":
    if sys.argv[1] == "parse":
        print(json.dumps(parse(json.load(sys.stdin))))
    else:
        print(json.dumps(flags(), sort_keys=True))
