"""Runs inside the cached vLLM 0.33 venv (scripts/vllm_parser_env.sh), not under speclab's venv.

Reads a JSON list of cases on stdin, each ``{"argv": [...], "max_batch_size": N}``: parses the
argv with vLLM's own ``vllm serve`` parser, then hands the parsed ``speculative_config``'s
``num_speculative_tokens_per_batch_size`` (if any) to vLLM's own schedule validation and the
dense batch-size -> k lookup its scheduler builds. Prints one result per case.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import (
    build_dynamic_sd_schedule_lookup,
    validate_and_normalize_dynamic_sd_schedule,
)


def run(case: dict) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = make_arg_parser(FlexibleArgumentParser()).parse_args(case["argv"])
    except SystemExit as exc:
        return {"ok": False, "error": f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1:]}"}
    spec = ns.speculative_config
    out: dict = {"ok": True, "speculative_config": spec}
    schedule = (spec or {}).get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        try:
            out["normalized"] = [list(e) for e in validate_and_normalize_dynamic_sd_schedule(schedule)]
            out["dense"] = build_dynamic_sd_schedule_lookup(schedule, case["max_batch_size"], spec["num_speculative_tokens"])
        except ValueError as exc:
            out.update(ok=False, error=f"ValueError: {exc}")
    return out


if __name__ == "__main__":
    print(json.dumps([run(case) for case in json.load(sys.stdin)]))
