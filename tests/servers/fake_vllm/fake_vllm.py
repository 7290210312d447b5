"""The fake `vllm` executable's body: record argv, map real model names to simulator stand-ins, exec.

Environment:
- ``SPECLAB_FAKE_VLLM_ARGV_LOG``: append ``{"argv": [...]}`` (argv after ``vllm``) as a JSON line.
- ``SPECLAB_FAKE_VLLM_MODEL_MAP``: JSON ``{"real/model": "sim-8b", ...}``; default: every bundled
  lab's target/draft ``model`` -> ``sim_model``.
- ``SPECLAB_FAKE_VLLM_SIM_MODULE``: the module to run (default ``speclab.sim``).
- ``SPECLAB_FAKE_VLLM_PYTHON``: the interpreter (set by the bash wrapper's caller).

Only ``vllm serve MODEL [flags]`` is supported, as that is all speclab runs. The revision and
tokenizer flags name real checkpoints and are dropped; everything else passes through unchanged.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

DROP = {"--revision", "--tokenizer"}


def model_map() -> dict[str, str]:
    if os.environ.get("SPECLAB_FAKE_VLLM_MODEL_MAP"):
        return dict(json.loads(os.environ["SPECLAB_FAKE_VLLM_MODEL_MAP"]))
    labs = Path(__file__).resolve().parents[3] / "speclab" / "bundled" / "labs"
    mapping: dict[str, str] = {}
    for path in glob.glob(str(labs / "**" / "*.toml"), recursive=True):
        data = tomllib.loads(Path(path).read_text())
        for section in ("target", "draft"):
            entry = data.get(section) or {}
            if entry.get("model") and entry.get("sim_model"):
                mapping.setdefault(entry["model"], entry["sim_model"])
    return mapping


def translate(args: list[str], mapping: dict[str, str]) -> list[str]:
    if not args or args[0] != "serve" or len(args) < 2:
        sys.exit("fake vllm: only `vllm serve MODEL [flags]` is supported")
    model = args[1]
    out = [mapping.get(model, model)]
    rest = args[2:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in DROP:
            i += 2
            continue
        if arg == "--speculative-config" and i + 1 < len(rest):
            spec = json.loads(rest[i + 1])
            if "model" in spec:
                spec["model"] = mapping.get(spec["model"], spec["model"])
            spec.pop("revision", None)
            out += [arg, json.dumps(spec)]
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def main() -> None:
    args = sys.argv[1:]
    log = os.environ.get("SPECLAB_FAKE_VLLM_ARGV_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": args, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
    module = os.environ.get("SPECLAB_FAKE_VLLM_SIM_MODULE", "speclab.sim")
    sim_args = translate(args, model_map())
    os.execv(sys.executable, [sys.executable, "-m", module, *sim_args])


if __name__ == "__main__":
    main()
