"""Regenerate vLLM 0.33's `vllm serve` flag table (speclab/model/data/) from vLLM's own parser.

    python3 scripts/regen_vllm_flags.py           # write the data file
    python3 scripts/regen_vllm_flags.py --check   # exit 1 if the committed file differs

Needs the cached parser environment that scripts/vllm_parser_env.sh builds (``$SPECLAB_VLLM_VENV``,
default ``~/.cache/speclab/vllm-parser-venv``); scripts/vllm_parser_probe.py runs inside it and
prints every option string the parser knows. The file holds that table as the parser states it;
which flags speclab emits, and which flags older versions had, are kept by hand beside the loader
(speclab/model/vllm_flags.py), and tests/servers/test_vllm_parser.py checks both against the parser.
Standard library only, so it runs under any Python 3.10+.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROBE = HERE / "vllm_parser_probe.py"
TARGET = HERE.parent / "speclab" / "model" / "data" / "vllm_0_33_serve_flags.json"
VLLM_VERSION = "0.33.0"
# argparse's own help option, which every parser has and speclab never passes
HELP = {"flags": "--help", "aliases": "-h"}


def venv_python() -> Path:
    venv = os.environ.get("SPECLAB_VLLM_VENV") or str(Path.home() / ".cache/speclab/vllm-parser-venv")
    return Path(venv) / "bin" / "python"


def parser_tables() -> dict[str, Any]:
    """``{"flags": {--long: takes_value}, "aliases": {-short: --long}}`` from vLLM's parser."""
    out = subprocess.run(
        [str(venv_python()), str(PROBE), "flags"],
        capture_output=True, text=True, check=True, timeout=300,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    return dict(json.loads(out.stdout))


def render(tables: dict[str, Any]) -> str:
    """The data file's text for the parser's tables: sorted, one entry a line, help left out."""
    doc = {
        "vllm": VLLM_VERSION,
        "generated_by": "scripts/regen_vllm_flags.py",
        "flags": {k: bool(v) for k, v in sorted(tables["flags"].items()) if k != HELP["flags"]},
        "aliases": {k: str(v) for k, v in sorted(tables["aliases"].items()) if k != HELP["aliases"]},
    }
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    if not (venv_python().parent.parent / ".speclab-ready").exists():
        print(f"regen_vllm_flags: no parser environment at {venv_python().parent.parent}; "
              "build it with scripts/vllm_parser_env.sh", file=sys.stderr)
        return 2
    text = render(parser_tables())
    if args.check:
        same = TARGET.exists() and TARGET.read_text(encoding="utf-8") == text
        print(f"{TARGET.relative_to(HERE.parent)}: {'matches' if same else 'differs from'} vLLM {VLLM_VERSION}'s parser")
        return 0 if same else 1
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
