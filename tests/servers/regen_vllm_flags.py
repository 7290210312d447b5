"""Regenerate the parser-derived tables in speclab/model/vllm_flags.py from vLLM 0.33's parser.

    .venv/bin/python -m tests.servers.regen_vllm_flags

Needs the cached parser venv (scripts/vllm_parser_env.sh). ``EMITTED`` and ``REMOVED`` are kept
by hand and checked by tests/servers/test_vllm_parser.py; ``OTHER_KNOWN`` (every other option the
parser accepts) and ``SHORT_ALIASES`` are rewritten between the GENERATED markers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE.parent.parent / "speclab" / "model" / "vllm_flags.py"


def venv_python() -> Path:
    venv = os.environ.get("SPECLAB_VLLM_VENV") or str(Path.home() / ".cache/speclab/vllm-parser-venv")
    return Path(venv) / "bin" / "python"


def parser_tables() -> dict:
    out = subprocess.run(
        [str(venv_python()), str(HERE / "vllm_parser_probe.py"), "flags"],
        capture_output=True, text=True, check=True, timeout=300,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    return json.loads(out.stdout)


def render(tables: dict, emitted: set[str]) -> str:
    lines = ["OTHER_KNOWN: Final[dict[str, bool]] = {"]
    for flag, takes in sorted(tables["flags"].items()):
        if flag not in emitted and flag != "--help":
            lines.append(f"    {json.dumps(flag)}: {takes},")
    lines.append("}")
    lines.append("")
    lines.append("SHORT_ALIASES: Final[dict[str, str]] = {")
    for short, long in sorted(tables["aliases"].items()):
        if short != "-h":
            lines.append(f"    {json.dumps(short)}: {json.dumps(long)},")
    lines.append("}")
    return "\n".join(lines)


def main() -> None:
    from speclab.model.vllm_flags import EMITTED

    text = TARGET.read_text()
    block = render(parser_tables(), set(EMITTED))
    new = re.sub(
        r"(# BEGIN GENERATED[^\n]*\n).*?(^# END GENERATED)", lambda m: m.group(1) + block + "\n" + m.group(2), text, flags=re.S | re.M
    )
    TARGET.write_text(new)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
